"""Fidelity of the simulator against the executor on this machine (``stalesim validate``).

``python -m benchmarks.bench_validate [--model resnet20] [--iterations 24] [--out DIR] [--repeat K]``

Runs ``validate`` on 2 CPU ranks over every schedule and prints, per schedule,
predicted vs measured iteration time, utilization and speed-up, then the
aggregates next to the goals (median |time error| <= 3%, max <= 8%,
utilization within 3 points, speed-up within 5%) and the load average, which
decides whether the numbers mean anything: on a shared 2-core machine any
other process steals time from the ranks but not from the profile taken
minutes earlier. Run it on a quiet machine (``uptime`` load well below 1).
With ``--repeat K`` it validates K times and reports the median per schedule.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_validate")
    p.add_argument("--model", default="resnet20")
    p.add_argument("--devices", default="cpu:2")
    p.add_argument("--schedules", default="all")
    p.add_argument("--iterations", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", default="runs/bench_validate")
    p.add_argument("--no-contention", action="store_true")
    p.add_argument("--no-overhead", action="store_true")
    args = p.parse_args(argv if argv is not None else (sys.argv[1:] if __name__ == "__main__" else []))

    from stalesim.cli.validate_cmd import summary_table
    from stalesim.validate.compare import GOALS
    from stalesim.validate.config import ValidateConfig
    from stalesim.validate.workflow import validate

    runs = []
    hw = None
    for k in range(args.repeat):
        out = args.out if args.repeat == 1 else f"{args.out}/run{k}"
        cfg = ValidateConfig(model=args.model, devices=args.devices, schedules=[args.schedules],
                             iterations=args.iterations, batch_size=args.batch_size,
                             microbatches=args.microbatches, out=out, emulate_iterations=3,
                             contention=not args.no_contention, overhead=not args.no_overhead,
                             hardware=hw, command="python -m benchmarks.bench_validate " +
                             " ".join(argv if argv is not None else sys.argv[1:]))
        t0 = time.perf_counter()
        s = validate(cfg, progress=lambda m: print(m, flush=True))
        hw = f"{out}/hardware.json"  # calibrate once
        print(summary_table(s))
        print(f"({time.perf_counter() - t0:.0f} s; load average before {s['load_average']['before']}, "
              f"after {s['load_average']['after']}; report {out}/report.md)\n", flush=True)
        runs.append(s)
    names = [r["schedule"] for r in runs[0]["rows"]]

    def med(key: str, name: str) -> float | None:
        vals = [r[key] for s in runs for r in s["rows"] if r["schedule"] == name and r[key] is not None]
        return statistics.median(vals) if vals else None

    print(f"{'schedule':12} {'time err':>9} {'util pred':>9} {'util meas':>9} {'sp pred':>8} {'sp meas':>8}")
    te, ue, se = [], [], []
    for n in names:
        e = med("time_error", n)
        pu, mu = med("predicted_utilization_mean", n), med("measured_utilization_mean", n)
        ps, ms = med("predicted_speedup", n), med("measured_speedup", n)
        if e is not None:
            te.append(abs(e))
        if pu is not None and mu is not None:
            ue.append(abs(pu - mu) * 100)
        if ps and ms:
            se.append(abs(ps - ms) / ms)
        print(f"{n:12} {_pct(e):>9} {_f(pu):>9} {_f(mu):>9} {_f(ps):>8} {_f(ms):>8}")
    agg = {"median_abs_time_error": statistics.median(te) if te else None,
           "max_abs_time_error": max(te) if te else None,
           "max_abs_utilization_error_points": max(ue) if ue else None,
           "max_abs_speedup_error": max(se) if se else None}
    print()
    for k, goal in GOALS.items():
        v = agg[k]
        unit = " points" if "points" in k else ""
        shown = "n/a" if v is None else (f"{v:.1f}" if unit else f"{v:.1%}")
        goal_s = f"{goal:g}" if unit else f"{goal:.0%}"
        ok = "n/a" if v is None else ("met" if v <= goal else "MISSED")
        print(f"{k:36} {shown:>8}{unit}  goal <= {goal_s}{unit}  {ok}")
    print(f"load average now {tuple(round(x, 2) for x in os.getloadavg())} "
          f"(cores: {os.cpu_count()}); numbers are only meaningful well below 1")
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
