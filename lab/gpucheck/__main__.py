"""``python -m lab.gpucheck [--part N] [--dry] [--out DIR]``: the GPU campaign (docs/gpu-check.md).

Exit status: 0 when every step run passed or was skipped, 1 when one failed or broke, 2 for bad
input (one ``stalesim: error:`` line).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lab.gpucheck.paths import ROOT
from lab.gpucheck.plan import PARTS, check_plan, part_budget_s, step_named, steps_of
from stalesim.cli import _Parser
from stalesim.cli.common import int_type
from stalesim.errors import StalesimError


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="stalesim gpu-check", description=__doc__.splitlines()[0],
                epilog="Parts (each at most 9 minutes): " + "; ".join(
                    f"{n}: {', '.join(s.name for s in steps_of(n))} ({part_budget_s(n)} s)" for n in PARTS))
    p.add_argument("--part", type=int_type(min(PARTS), max(PARTS)), default=None,
                   help="run one part only (a lent machine caps a command at 10 minutes)")
    p.add_argument("--steps", default=None, help="comma-separated step names (default: all of the part)")
    p.add_argument("--dry", action="store_true", help="CPU dry mode: plan checks and tiny CPU variants")
    p.add_argument("--out", default=None, help="results folder (default docs/results/gpu-check-<gpu>, "
                                               "runs/gpu-check-cpu-dry when --dry)")
    p.add_argument("--data-dir", default=None, help="dataset root (default $STALESIM_DATA; synthetic without)")
    p.add_argument("--in-process", action="store_true", help="run the steps in this process (no isolation)")
    p.add_argument("--list", action="store_true", help="print the steps, budgets and parts, and exit")
    p.add_argument("--summarize", action="store_true", help="rebuild summary.json/.md from the step records")
    p.add_argument("--step", default=None, help=argparse.SUPPRESS)  # one isolated step (the runner's child)
    p.add_argument("--gpus", type=int_type(0, 4096), default=None, help=argparse.SUPPRESS)
    return p


def _selected(args: argparse.Namespace) -> list:
    steps = steps_of(args.part)
    if args.steps is not None:
        names = [n.strip() for n in args.steps.split(",") if n.strip()]
        if not names:
            raise StalesimError("--steps: give at least one step name")
        wanted = {step_named(n).name for n in names}
        steps = [s for s in steps if s.name in wanted]
        if not steps:
            raise StalesimError(f"--steps: none of {', '.join(sorted(wanted))} is in part {args.part}")
    return steps


def _list() -> None:
    for n in PARTS:
        print(f"part {n} ({part_budget_s(n)} s with the environment read):")
        for s in steps_of(n):
            print(f"  {s.name:20s} {s.budget_s:4d} s  {s.what}")
    print(f"total {check_plan()['total_s']} s")


def run(args: argparse.Namespace) -> int:
    from lab.gpucheck.report import Context, read_environment, write_summary
    from lab.gpucheck.runner import call_step, campaign_order, default_out, run_steps
    from stalesim.atomic import check_writable_dir, write_json_atomic

    if args.list:
        _list()
        return 0
    steps = _selected(args)
    data_dir = args.data_dir if args.data_dir is not None else os.environ.get("STALESIM_DATA") or None
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise StalesimError(f"--data-dir: {args.data_dir!r} is not a folder")
    if args.step is not None:  # the runner's child: one step, its record, nothing else
        if args.out is None:
            raise StalesimError("--step: needs --out (the campaign's folder)")
        ctx = Context(Path(args.out), dry=args.dry, data_dir=data_dir, gpus=args.gpus or 0)
        rec = call_step(step_named(args.step), ctx)
        return 0 if rec["status"] in ("pass", "skip") else 1
    from lab.gpucheck.env import environment

    env = environment(args.dry)
    if not args.dry and not env["gpu_count"] and not args.summarize:
        raise StalesimError("gpu-check: no CUDA device visible (use --dry for the CPU dry mode)")
    out = check_writable_dir(Path(args.out) if args.out else default_out(env, ROOT))
    order = campaign_order()
    if args.summarize:  # the machine the steps ran on, not this one
        env = read_environment(out) or env
    else:
        write_json_atomic(out / "environment.json", env)
        ctx = Context(out, dry=args.dry, data_dir=data_dir, gpus=env["gpu_count"])
        print(f"gpu-check: {env['gpu_count']} GPU(s) {', '.join(env['gpu_names']) or ''}, torch {env['torch']}, "
              f"CUDA {env['cuda']}; results in {out}", flush=True)
        run_steps(steps, ctx, isolate=not (args.dry or args.in_process),
                  say=lambda m: print(m, flush=True))
    summary = write_summary(out, env, check_plan(), order)
    ran = {s.name for s in steps}
    bad = [r["step"] for r in summary["steps"] if r["step"] in ran and r["status"] in ("fail", "error")]
    print(f"gpu-check: {summary['counts']}; summary: {out / 'summary.md'}")
    if bad:
        print(f"gpu-check: failed or broke: {', '.join(bad)}")
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except StalesimError as exc:
        print(f"stalesim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
