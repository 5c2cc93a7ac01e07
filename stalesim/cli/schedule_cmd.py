"""``stalesim schedule NAME``: print a schedule's step x device grid and version table."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from stalesim.cli.common import nonneg_int, positive_int, print_json

if TYPE_CHECKING:
    from stalesim.schedule import ScheduleConfig
    from stalesim.schedule.ir import Schedule

# what `stalesim schedule` prints: about 100,000 actions take a few seconds to build and
# render; a longer grid is unreadable (the simulator and the emulator take longer runs)
from stalesim.limits import MAX_SHOWN


def add_schedule_args(p: argparse.ArgumentParser, *, batches: bool = True) -> None:
    """Schedule-shape flags shared with simulate/emulate/run (-> ScheduleConfig fields).

    ``--fold D`` places the S stages on D devices. ``batches``: take the schedule's N as
    ``--batches``/``-N``; a training command passes False, its run length being
    ``--iterations`` (one spelling per concept).
    """
    p.add_argument("--stages", "-S", type=positive_int, default=None, help="pipeline stages S")
    if batches:
        p.add_argument("--batches", "-N", type=positive_int, default=None, help="mini-batches N")
    p.add_argument("--microbatches", "-M", type=positive_int, default=1, help="micro-batches per batch M")
    p.add_argument("--workers", "-P", type=positive_int, default=1, help="data-parallel workers P")
    p.add_argument("--fold", type=positive_int, default=None, metavar="D",
                   help="fold the S stages contiguously onto D devices (pipeline schedules)")
    p.add_argument("--switch", type=nonneg_int, default=None,
                   help="hybrid: batches run stale-pipelined before switching (default N/2)")
    p.add_argument("--warmup", type=nonneg_int, default=0,
                   help="synchronous warm-up: the first K batches run without staleness")
    p.add_argument("--stages-per-device", "-V", type=positive_int, default=None, metavar="V",
                   help="virtual stages: V model chunks per device, S/V devices (interleaved "
                        "schedules; default: the schedule's, 2 for interleaving, ZB-V, DualPipeV)")


def config_from_args(args: argparse.Namespace, *, stages: int | None = None,
                     batches: int | None = None) -> ScheduleConfig:
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
        stages_per_device=args.stages_per_device,
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
    t = p.add_argument_group("torch.distributed.pipelining interop")
    t.add_argument("--from-torch", default=None, metavar="CLASS",
                   help="build the IR from torch's own per-rank order of this schedule class "
                        "(GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
                        "ZBVZeroBubble, DualPipeV); with --ranks and --microbatches")
    t.add_argument("--from-torch-csv", default=None, metavar="FILE",
                   help="build the IR from torch's schedule CSV (one row per rank, e.g. 0F0,1I0,...)")
    t.add_argument("--ranks", type=positive_int, default=None, help="--from-torch: pipeline ranks")
    t.add_argument("--stages-per-rank", type=positive_int, default=None, metavar="V",
                   help="--from-torch: stages per rank (default: 2 for the V schedules, else 1)")
    t.add_argument("--to-torch-csv", default=None, metavar="FILE",
                   help="write one flushed batch of the schedule as torch's compute-only CSV")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.errors import StalesimError
    from stalesim.schedule import build_schedule, get_spec
    from stalesim.schedule.render import grid, version_table

    if args.name and args.schedule and args.name != args.schedule:
        raise StalesimError(f"schedule: given twice ({args.name!r} and --schedule {args.schedule!r})")
    args.schedule = args.name or args.schedule
    imported = args.from_torch is not None or args.from_torch_csv is not None
    if imported:
        sched, summary = _imported(args)
    else:
        if args.ranks is not None or args.stages_per_rank is not None:
            raise StalesimError("--ranks/--stages-per-rank: only with --from-torch "
                                "(our schedules take --stages S and --stages-per-device V)")
        if not args.schedule:
            raise StalesimError("schedule: give a schedule name (stalesim schedule NAME), "
                                "or --from-torch CLASS / --from-torch-csv FILE")
        spec = get_spec(args.schedule)
        cfg = config_from_args(args, batches=args.batches or 8)
        if cfg.compute_actions() > MAX_SHOWN:  # a grid nobody reads, after minutes of building
            raise StalesimError(f"batches: about {cfg.compute_actions():,} actions are more than this command "
                                f"prints (at most {MAX_SHOWN:,}); show fewer batches, stages or micro-batches")
        sched = build_schedule(cfg)
        summary = spec.summary
    written = None
    if args.to_torch_csv is not None:  # '' is an error there, not "no export"
        from stalesim.schedule.torch_interop import to_torch_csv

        written = str(to_torch_csv(sched, args.to_torch_csv))
    if args.json:
        d = sched.to_dict()
        if written:
            d["torch_csv"] = written
        print_json(d)
        return 0
    print(f"schedule {sched.name}: {summary}")
    print(f"stages={sched.stages} batches={sched.batches} microbatches={sched.microbatches} "
          f"workers={sched.workers} devices={sched.num_devices} "
          f"stages_per_device={sched.stages_per_device} policy={sched.policy}"
          + "".join(f" {k}={v}" for k, v in sched.params.items()))
    print()
    print(grid(sched))
    print()
    print(version_table(sched))
    if written:
        print(f"\ntorch csv: {written}")
    return 0


def _imported(args: argparse.Namespace) -> tuple[Schedule, str]:
    """(schedule, one-line summary) of ``--from-torch`` / ``--from-torch-csv``."""
    from stalesim.errors import StalesimError
    from stalesim.schedule.torch_interop import from_torch, read_torch_csv, schedule_from_orders

    if args.schedule:
        raise StalesimError("--from-torch: give a torch class or a schedule NAME, not both")
    if args.from_torch is not None and args.from_torch_csv is not None:
        raise StalesimError("--from-torch: give --from-torch or --from-torch-csv, not both")
    for flag in ("stages", "fold", "switch", "stages_per_device"):
        if getattr(args, flag) is not None:
            raise StalesimError(f"--{flag.replace('_', '-')}: not with --from-torch (torch's order "
                                "fixes the stages; use --ranks and --stages-per-rank)")
    if args.workers != 1 or args.warmup:
        raise StalesimError("--workers/--warmup: not with --from-torch")
    batches = args.batches or 1
    if args.from_torch_csv is not None:
        if args.ranks is not None or args.stages_per_rank is not None:
            raise StalesimError("--ranks/--stages-per-rank: the CSV fixes them (one row per rank)")
        orders = read_torch_csv(args.from_torch_csv)
        _check_shown(batches, sum(len(ops) for ops in orders.values()))
        sched = schedule_from_orders(orders, batches=batches, name=f"torch-csv:{args.from_torch_csv}")
        return sched, "torch CSV order, lowered and validated by the IR"
    if args.ranks is None:
        raise StalesimError("--ranks: --from-torch needs the number of pipeline ranks")
    _check_shown(batches, 3 * args.ranks * (args.stages_per_rank or 1) * args.microbatches)
    sched = from_torch(args.from_torch, args.ranks, args.microbatches, args.stages_per_rank,
                       batches=batches)
    return sched, same_as_ours(sched)


def _check_shown(batches: int, step: int) -> None:
    """The same bound as for our own schedules (``step`` actions per batch), before building."""
    from stalesim.errors import StalesimError

    if batches * step > MAX_SHOWN:
        raise StalesimError(f"batches: about {batches * step:,} actions are more than this command "
                            f"prints (at most {MAX_SHOWN:,}); show fewer batches or micro-batches")


def same_as_ours(sched: Schedule) -> str:
    """Whether stalesim's own generator of the same schedule orders it identically."""
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.schedule.torch_interop import compute_orders

    phase = sched.phases[0].schedule if sched.phases else None
    if phase is None:
        return "torch's own order (stalesim has no generator of this class)"
    try:
        ours = build_schedule(ScheduleConfig(phase, stages=sched.stages, batches=sched.batches,
                                             microbatches=sched.microbatches,
                                             stages_per_device=sched.stages_per_device))
    except Exception as exc:  # noqa: BLE001 - a config ours refuses: say so, do not fail
        return f"torch's own order (stalesim's {phase!r} refuses this shape: {exc})"
    same = compute_orders(ours) == compute_orders(sched)
    return (f"torch's own order; identical to stalesim's {phase!r}" if same
            else f"torch's own order; differs from stalesim's {phase!r}")
