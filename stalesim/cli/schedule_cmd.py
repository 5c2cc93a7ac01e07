"""``stalesim schedule NAME``: print a schedule's step x device grid and version table."""

from __future__ import annotations

import argparse

from stalesim.cli.common import nonneg_int, positive_int, print_json


def add_schedule_args(p: argparse.ArgumentParser, *, name_required: bool = True) -> None:
    """Schedule-shape flags shared with simulate/emulate/run."""
    p.add_argument("--stages", "-S", type=positive_int, default=None, help="pipeline stages S")
    p.add_argument("--batches", "-N", type=positive_int, default=None, help="mini-batches N")
    p.add_argument("--microbatches", "-M", type=positive_int, default=1, help="micro-batches per batch M")
    p.add_argument("--workers", "-P", type=positive_int, default=1, help="data-parallel workers P")
    p.add_argument("--devices", type=positive_int, default=None,
                   help="fold the S stages onto this many devices (pipeline schedules)")
    p.add_argument("--switch", type=nonneg_int, default=None,
                   help="hybrid: batches run stale-pipelined before switching (default N/2)")
    p.add_argument("--warmup", type=nonneg_int, default=0, help="pipe-sgd: synchronous warm-up steps")


def config_from_args(args: argparse.Namespace, *, stages: int | None = None, batches: int | None = None):
    from stalesim.schedule import ScheduleConfig

    return ScheduleConfig(
        stages=stages if stages is not None else (args.stages or 1),
        batches=batches if batches is not None else (args.batches or 8),
        microbatches=args.microbatches,
        workers=args.workers,
        devices=args.devices,
        switch=args.switch,
        warmup=args.warmup,
    )


def register(sub: argparse._SubParsersAction) -> None:
    from stalesim.schedule import schedule_names

    p = sub.add_parser("schedule", help="show a schedule's action grid and derived version table",
                       description="Build a schedule from the IR generators and print the per-device "
                                   "action grid (unit-time dry run) and the derived version table.")
    p.add_argument("name", metavar="NAME", help=f"one of: {', '.join(schedule_names())}")
    add_schedule_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.schedule import build_schedule, get_spec
    from stalesim.schedule.render import grid, version_table

    spec = get_spec(args.name)
    sched = build_schedule(args.name, config_from_args(args))
    if args.json:
        print_json(sched.to_dict())
        return 0
    print(f"schedule {sched.name}: {spec.summary}")
    print(f"stages={sched.stages} batches={sched.batches} microbatches={sched.microbatches} "
          f"workers={sched.workers} devices={sched.num_devices} policy={sched.policy}")
    print()
    print(grid(sched))
    print()
    print(version_table(sched))
    return 0
