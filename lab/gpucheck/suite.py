"""Steps that run other entry points: the plan itself, ``pytest -m gpu``, the reproduce-gpu plan."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from lab.gpucheck.paths import ROOT, TESTS, tree_env
from lab.gpucheck.plan import STEPS, check_plan, step_named
from lab.gpucheck.report import Context, Outcome
from stalesim.atomic import write_text_atomic


def command_resolves(argv: tuple[str, ...]) -> str | None:
    """None if the command line parses (a ``stalesim`` sub-command, through its own parser) or
    names an importable module (``python -m MOD``); else why not, in one line."""
    if argv[:2] == ("python", "-m"):
        return None if importlib.util.find_spec(argv[2]) is not None else f"no module {argv[2]}"
    from stalesim.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return err.getvalue().strip().splitlines()[-1] if exc.code else None
    except argparse.ArgumentError as exc:
        return str(exc)
    return None


def plan_step(ctx: Context) -> Outcome:
    """The budgets fit the caps, and every step's command line parses."""
    o = Outcome(numbers=dict(check_plan()))
    for s in STEPS:
        for argv in s.commands:
            why = command_resolves(argv)
            o.check(f"{s.name}: {' '.join(argv[:4])} ...", why is None, why)
    return o


def gpu_test_files() -> list[Path]:
    """The suite's files with ``@pytest.mark.gpu`` tests (collecting only these keeps a lent
    machine from importing the whole suite and its CPU-only dependencies)."""
    return sorted(p for p in TESTS.rglob("test_*.py") if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def _junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    c = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def pytest_gpu_step(ctx: Context) -> Outcome:
    """``pytest -m gpu`` on the files that have GPU tests: all must pass, and some must have run
    (not skipped). Dry: collect them only (without CUDA every one would skip)."""
    files = gpu_test_files()
    junit = ctx.out / "pytest-gpu.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           *(["--collect-only"] if ctx.dry else [f"--junitxml={junit}"]), *map(str, files)]
    timeout = step_named("pytest_gpu").budget_s - 15
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                          env=tree_env())
    write_text_atomic(ctx.out / "pytest-gpu.log", proc.stdout + proc.stderr)
    o = Outcome(numbers={"files": [p.name for p in files], "exit_code": proc.returncode})
    if ctx.dry:
        m = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
        n = int(m.group(1)) if m else 0
        o.numbers["collected"] = n
        o.check("GPU tests collect", proc.returncode == 0 and n > 0, n, "> 0")
        return o
    counts = _junit_counts(junit) if junit.is_file() else {}
    o.numbers.update(counts)
    o.check("pytest -m gpu passes", proc.returncode == 0 and counts.get("failures", 1) == 0
            and counts.get("errors", 1) == 0, proc.returncode, 0)
    o.check("some GPU tests ran", counts.get("passed", 0) > 0, counts.get("passed", 0), "> 0")
    return o


def reproduce_plan_step(ctx: Context) -> Outcome:
    """The reproduce-gpu plan and estimate: on a GPU, ``python -m lab.reproduce gpu --dry-run``
    itself; the dry mode, which has no CUDA (that command refuses), runs its plan and estimate for
    an H100 with the 2-GPU table."""
    work = ctx.out / "reproduce-gpu-work"
    if ctx.dry:
        from lab.reproduce.gpu import PAPER, estimate, format_estimate, plan
        from stalesim.figures.common import SHAPE_PROFILES

        jobs = plan(PAPER, two_gpus=True, data_dir=ctx.data_dir)
        text = format_estimate(jobs, estimate(jobs, "h100-sxm", SHAPE_PROFILES, PAPER),
                               "h100-sxm", None, work)
        code = 0
    else:
        cmd = [sys.executable, "-m", "lab.reproduce", "gpu", "--dry-run", "--out", str(work),
               "--results", str(ctx.out / "reproduce-gpu-results"),
               *(["--data-dir", ctx.data_dir] if ctx.data_dir else [])]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=tree_env(),
                              timeout=step_named("reproduce_plan").budget_s - 10)
        text, code = proc.stdout + proc.stderr, proc.returncode
    head = re.search(r"reproduce-gpu: (\d+) jobs, (\d+) runs", text)
    total = re.search(r"total left ~([0-9.]+) h", text)
    o = Outcome(numbers={"exit_code": code, "jobs": int(head.group(1)) if head else 0,
                         "runs": int(head.group(2)) if head else 0,
                         "estimate_h": float(total.group(1)) if total else None, "text": text.splitlines()[:3]})
    o.check("the plan prints jobs and an estimate", code == 0 and o.numbers["jobs"] > 0 and total is not None,
            o.numbers["jobs"], "> 0")
    return o
