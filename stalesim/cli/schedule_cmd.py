"""``stalesim schedule NAME``: print a schedule's step x device grid and version table."""

from __future__ import annotations

import argparse

from stalesim.cli.common import nonneg_int, positive_int, print_json

# what `stalesim schedule` prints: about 100,000 actions take a few seconds to build and
# render; a longer grid is unreadable (the simulator and the emulator take longer runs)
MAX_SHOWN = 100_000


def add_schedule_args(p: argparse.ArgumentParser, *, devices_alias: bool = True) -> None:
    """Schedule-shape flags shared with simulate/emulate/run (-> ScheduleConfig fields).

    ``--fold D`` places the S stages on D devices. ``--devices N`` was its spelling
    before 0.2 and stays as a hidden alias on the commands where ``--devices`` is
    not the rank list of a real run (``devices_alias``).
    """
    p.add_argument("--stages", "-S", type=positive_int, default=None, help="pipeline stages S")
    p.add_argument("--batches", "-N", type=positive_int, default=None, help="mini-batches N")
    p.add_argument("--microbatches", "-M", type=positive_int, default=1, help="micro-batches per batch M")
    p.add_argument("--workers", "-P", type=positive_int, default=1, help="data-parallel workers P")
    p.add_argument("--fold", type=positive_int, default=None, metavar="D",
                   help="fold the S stages contiguously onto D devices (pipeline schedules)")
    if devices_alias:
        p.add_argument("--devices", type=positive_int, dest="fold", help=argparse.SUPPRESS)
    p.add_argument("--switch", type=nonneg_int, default=None,
                   help="hybrid: batches run stale-pipelined before switching (default N/2)")
    p.add_argument("--warmup", type=nonneg_int, default=0,
                   help="synchronous warm-up: the first K batches run without staleness")


def config_from_args(args: argparse.Namespace, *, stages: int | None = None, batches: int | None = None):
    """The ScheduleConfig the flags describe (every field, nothing dropped)."""
    from stalesim.schedule import ScheduleConfig

    return ScheduleConfig(
        schedule=args.schedule,
        stages=stages if stages is not None else (args.stages or 1),
        batches=batches if batches is not None else args.batches,
        microbatches=args.microbatches,
        workers=args.workers,
        fold=args.fold,
        switch=args.switch,
        warmup=args.warmup,
    )


def register(sub: argparse._SubParsersAction) -> None:
    from stalesim.schedule import schedule_names

    p = sub.add_parser("schedule", help="show a schedule's action grid and derived version table",
                       description="Build a schedule from the IR generators and print the per-device "
                                   "action grid (unit-time dry run) and the derived version table.")
    p.add_argument("name", metavar="NAME", nargs="?", default=None,
                   help=f"one of: {', '.join(schedule_names())} (or --schedule NAME)")
    p.add_argument("--schedule", default=None, metavar="NAME", help=argparse.SUPPRESS)
    add_schedule_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.errors import StalesimError
    from stalesim.schedule import build_schedule, get_spec
    from stalesim.schedule.render import grid, version_table

    if args.name and args.schedule and args.name != args.schedule:
        raise StalesimError(f"schedule: given twice ({args.name!r} and --schedule {args.schedule!r})")
    args.schedule = args.name or args.schedule
    if not args.schedule:
        raise StalesimError("schedule: give a schedule name (stalesim schedule NAME)")
    spec = get_spec(args.schedule)
    cfg = config_from_args(args, batches=args.batches or 8)
    if cfg.compute_actions() > MAX_SHOWN:  # a grid nobody reads, after minutes of building
        raise StalesimError(f"batches: about {cfg.compute_actions():,} actions are more than this command "
                            f"prints (at most {MAX_SHOWN:,}); show fewer batches, stages or micro-batches")
    sched = build_schedule(cfg)
    if args.json:
        print_json(sched.to_dict())
        return 0
    print(f"schedule {sched.name}: {spec.summary}")
    print(f"stages={sched.stages} batches={sched.batches} microbatches={sched.microbatches} "
          f"workers={sched.workers} devices={sched.num_devices} policy={sched.policy}"
          + "".join(f" {k}={v}" for k, v in sched.params.items()))
    print()
    print(grid(sched))
    print()
    print(version_table(sched))
    return 0
