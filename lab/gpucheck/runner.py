"""Run a part's steps and write the summary.

On a GPU each step runs in its own process (``python -m lab.gpucheck --step NAME``) killed at
its budget: a CUDA error poisons the process that hit it and a hung NCCL call never returns, and
either must cost one step, not the part. The dry mode runs the steps in this process (one torch
import instead of one per step, on a busy CI machine).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.gpucheck.paths import tree_env
from lab.gpucheck.plan import STEPS, Step
from lab.gpucheck.report import Context, Outcome, status_of, step_path, step_record, write_step
from stalesim.atomic import ensure_dir


def call_step(step: Step, ctx: Context) -> dict[str, Any]:
    """Run one step here; every exception becomes an ``error`` record (the campaign goes on)."""
    t0 = time.perf_counter()
    if ctx.gpus < step.min_gpus and not ctx.dry:
        rec = step_record(step.name, step.part, step.budget_s, "skip", 0.0, dry=ctx.dry,
                          outcome=Outcome(skipped=f"needs {step.min_gpus} GPUs, {ctx.gpus} visible"))
        write_step(ctx.out, rec)
        return rec
    module, func = step.run.split(":")
    try:
        fn: Callable[[Context], Outcome] = getattr(importlib.import_module(f"lab.gpucheck.{module}"), func)
        outcome = fn(ctx)
        rec = step_record(step.name, step.part, step.budget_s, status_of(outcome), time.perf_counter() - t0,
                          outcome=outcome, dry=ctx.dry)
    except Exception as exc:  # noqa: BLE001 - one broken path must not hide the others
        tb = traceback.format_exc().strip().splitlines()[-12:]
        rec = step_record(step.name, step.part, step.budget_s, "error", time.perf_counter() - t0, dry=ctx.dry,
                          error="\n".join([*tb[:-1], f"{type(exc).__name__}: {exc}"]))
    write_step(ctx.out, rec)
    return rec


def isolated_step(step: Step, ctx: Context) -> dict[str, Any]:
    """Run one step in a child process killed at the step's budget; its output goes to
    ``logs/<step>.log``. A child that dies or runs out of time leaves an ``error`` record."""
    log = ensure_dir(ctx.out / "logs") / f"{step.name}.log"
    record = step_path(ctx.out, step.name)
    record.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "lab.gpucheck", "--step", step.name, "--out", str(ctx.out),
           "--gpus", str(ctx.gpus), *(["--data-dir", ctx.data_dir] if ctx.data_dir else []),
           *(["--dry"] if ctx.dry else [])]
    t0 = time.perf_counter()
    why = None
    with open(log, "w", encoding="utf-8") as fh:  # a live log: a killed step leaves what it printed
        # its own session, so that on a timeout the whole group goes (ranks, pytest's children)
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=tree_env())
        try:
            code = proc.wait(timeout=step.budget_s)
            if not record.is_file():
                why = f"step process exited with status {code} and no record"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            why = f"killed at its budget of {step.budget_s} s"
    if why is None:
        import json

        return json.loads(record.read_text(encoding="utf-8"))
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-8:]
    rec = step_record(step.name, step.part, step.budget_s, "error", time.perf_counter() - t0, dry=ctx.dry,
                      error="\n".join([*tail, why]))
    write_step(ctx.out, rec)
    return rec


def run_steps(steps: list[Step], ctx: Context, *, isolate: bool,
              say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    recs = []
    for k, step in enumerate(steps, 1):
        say(f"[gpu-check {k}/{len(steps)}] {step.name} (part {step.part}, budget {step.budget_s} s): {step.what}")
        rec = isolated_step(step, ctx) if isolate else call_step(step, ctx)
        say(f"  -> {rec['status']} in {rec['wall_s']:.1f} s" + (f": {rec['error'].splitlines()[-1]}"
                                                                 if rec.get("error") else ""))
        recs.append(rec)
    return recs


def campaign_order() -> list[str]:
    return [s.name for s in STEPS]


def default_out(env: dict[str, Any], root: Path) -> Path:
    """docs/results/gpu-check-<gpu> on a GPU; runs/gpu-check-cpu-dry for the dry mode (CI must
    not write into the docs)."""
    from lab.gpucheck.env import slug

    name = f"gpu-check-{slug(env)}"
    return root / ("runs" if env.get("dry") else "docs/results") / name
