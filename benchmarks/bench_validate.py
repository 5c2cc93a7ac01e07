"""Fidelity of the simulator against the executor on this machine (``stalesim validate``).

``python -m benchmarks.bench_validate [--model resnet20] [--iterations 24] [--out DIR] [--repeat K]``
(the full fidelity campaign is ``benchmarks/bench_fidelity.py``)

Runs ``validate`` on 2 CPU ranks over every schedule and prints, per schedule,
predicted vs measured iteration time, utilization and speed-up, then the
aggregates next to the goals (median |time error| <= 3%, max <= 8%,
utilization within 3 points, speed-up within 5%) and the load average, which
decides whether the numbers mean anything: on a shared 2-core machine any
other process steals time from the ranks but not from the profile taken
minutes earlier. Run it on a quiet machine (``uptime`` load well below 1).
``--repeat K`` (default 5) measures every schedule K times, interleaved round-robin
(``validate --repeats``), and compares with the median; each schedule's noise floor is
in the table. It waits for a quiet machine first (``--max-load``, ``--wait``).
"""

from __future__ import annotations

import argparse
import os
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
    p.add_argument("--repeat", type=int, default=5, help="interleaved repeats per schedule (validate --repeats)")
    p.add_argument("--max-load", type=float, default=0.6, help="wait for a 1-minute load below this")
    p.add_argument("--wait", type=float, default=900.0, help="at most this many seconds")
    p.add_argument("--out", default="runs/bench_validate")
    p.add_argument("--no-contention", action="store_true")
    p.add_argument("--no-overhead", action="store_true")
    args = p.parse_args(argv if argv is not None else (sys.argv[1:] if __name__ == "__main__" else []))

    from stalesim.cli.validate_cmd import summary_table
    from stalesim.validate.config import ValidateConfig
    from stalesim.validate.workflow import validate

    cfg = ValidateConfig(model=args.model, devices=args.devices, schedules=[args.schedules],
                         iterations=args.iterations, batch_size=args.batch_size,
                         microbatches=args.microbatches, out=args.out, emulate_iterations=3,
                         repeats=args.repeat, contention=not args.no_contention,
                         overhead=not args.no_overhead,
                         command="python -m benchmarks.bench_validate " +
                         " ".join(argv if argv is not None else sys.argv[1:]))
    from benchmarks.bench_fidelity import goal_lines, wait_quiet

    wait_quiet(args.max_load, args.wait)
    t0 = time.perf_counter()
    s = validate(cfg, progress=lambda m: print(m, flush=True))
    print(summary_table(s))
    print("\n".join(goal_lines(s, f"{args.model} batch {args.batch_size}, {args.repeat} interleaved repeat(s)")))
    print(f"({time.perf_counter() - t0:.0f} s; load average before {s['load_average']['before']}, "
          f"after {s['load_average']['after']}; report {args.out}/report.md)")
    print(f"load average now {tuple(round(x, 2) for x in os.getloadavg())} "
          f"(cores: {os.cpu_count()}); numbers are only meaningful well below 1")
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
