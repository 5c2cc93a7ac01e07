"""``stalesim partition``: min-max partition of a profile into S stages (or evaluate a PPV)."""

from __future__ import annotations

import argparse
import math
import re
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import float_type, int_list, positive_int, print_json, seconds
from stalesim.cli.model_source import add_model_source_args, load_costs
from stalesim.errors import StalesimError
from stalesim.limits import MAX_BYTES, MAX_RATE, MIN_RATE

if TYPE_CHECKING:
    from stalesim.workloads.partition import Partition
    from stalesim.workloads.profile import Profile

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "t": 1e12, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def byte_size(text: str) -> float:
    """argparse type: bytes, optionally with a unit (``8e9``, ``16GB``, ``40GiB``)."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 16GB, got {text!r}")
    try:
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in bytes, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a size > 0, got {text!r}")
    if value > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is larger than this tool handles (at most 1 EiB)")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "partition",
        help="balance a profile over S pipeline stages (min-max) and print the PPV",
        description=(
            "Exact min-max contiguous partition of the per-block forward+backward+update "
            "time into --stages stages (or evaluate a given --ppv). Memory per stage is "
            "parameters + bytes saved for backward. With --include-comm each cut costs "
            "2 x (latency + activation bytes / bandwidth) (activation forward, gradient "
            "back) charged to the stage before it."
        ),
    )
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="per-layer profile (or --model NAME: profile one here)")
    add_model_source_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--stages", type=positive_int, help="number of stages S")
    g.add_argument("--ppv", type=int_list, help="evaluate this PPV instead, e.g. 7 or 2,5")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="rescale the profile to this batch size first")
    p.add_argument("--memory-limit", type=byte_size, default=None, metavar="BYTES",
                   help="per-stage memory limit, e.g. 16GB or 8e9")
    p.add_argument("--include-comm", action="store_true",
                   help="add the cut's communication time to the stage before it")
    p.add_argument("--bandwidth", type=float_type(MIN_RATE, MAX_RATE), default=None, metavar="BYTES_PER_S",
                   help=f"link bandwidth, {MIN_RATE:g} to {MAX_RATE:g} bytes/s")
    p.add_argument("--latency", type=seconds, default=None, metavar="SECONDS",
                   help="link latency (default 0, or the --hardware link's)")
    p.add_argument("--hardware", default=None, metavar="HW.json",
                   help="take link latency/bandwidth from a hardware JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.workloads.partition import min_max_partition

    _check_link_flags(args)
    prof = load_costs(args, args.batch_size)
    if args.batch_size:
        prof = prof.at_batch_size(args.batch_size)
    comm, link_desc = _comm_costs(args, prof) if args.include_comm else (None, None)
    if args.ppv is not None:
        part = _evaluate_ppv(args, prof, comm)
        stages = len(part.cuts) + 1
    else:
        stages = args.stages
        part = min_max_partition(prof.costs(), stages, memory=prof.memory(),
                                 memory_limit=args.memory_limit, comm=comm,
                                 weight_layers=prof.weight_layers)
    stage_rows = _stage_rows(prof, part, stages)
    total = sum(prof.costs())
    result = {
        "model": prof.model,
        "profile": args.profile,
        "batch_size": prof.batch_size,
        "stages": stages,
        "ppv": part.ppv,
        "cuts": part.cuts,
        "bottleneck_stage": part.bottleneck_stage,
        "bottleneck_s": part.bottleneck,
        "total_compute_s": total,
        "ideal_speedup": total / part.bottleneck if part.bottleneck > 0 else None,
        "memory_limit_bytes": args.memory_limit,
        "link": link_desc,
        "stage_table": stage_rows,
    }
    if args.json:
        print_json(result)
    else:
        _print_table(prof, stages, part, stage_rows, total)
    return 0


def _check_link_flags(args: argparse.Namespace) -> None:
    """Link flags without --include-comm would be silently ignored: an error instead."""
    if args.include_comm:
        return
    given = [f for f, v in (("--hardware", args.hardware), ("--bandwidth", args.bandwidth),
                            ("--latency", args.latency)) if v is not None]
    if given:
        raise StalesimError(f"{given[0]}: only used with --include-comm (the cut's communication time)")


def _comm_costs(args: argparse.Namespace, prof: Profile) -> tuple[list[float], dict[str, float | None]]:
    """Each cut's communication time (activation forward, gradient back) and the link used:
    --latency/--bandwidth, else the --hardware link's."""
    lat, bw = args.latency, args.bandwidth
    if args.hardware:
        from stalesim.workloads.hardware import load_hardware

        hw = load_hardware(args.hardware)
        lat = hw.link.latency_s if lat is None else lat
        bw = hw.link.bandwidth_Bps if bw is None else bw
    lat = 0.0 if lat is None else lat
    if bw is None:
        raise StalesimError("--include-comm: needs --bandwidth BYTES_PER_S or --hardware")
    if not math.isfinite(lat) or lat < 0:
        raise StalesimError(f"--latency: must be a finite number >= 0, got {lat}")
    comm = [2 * (lat + lp.output_bytes / bw) for lp in prof.layers[:-1]]
    return comm, {"latency_s": lat, "bandwidth_Bps": None if math.isinf(bw) else bw}


def _evaluate_ppv(args: argparse.Namespace, prof: Profile, comm: list[float] | None) -> Partition:
    """The given --ppv's stages, costed directly (the min-max search restricted to one
    partition would be overkill), checked against --memory-limit."""
    from stalesim.workloads.partition import Partition, weights_ppv_to_cuts

    cuts = weights_ppv_to_cuts(prof.weight_layers, args.ppv)
    memory = prof.memory()
    bounds = [0, *cuts, prof.n_layers]
    costs = prof.costs()
    cm = comm or [0.0] * (prof.n_layers - 1)
    sc = [sum(costs[a:b]) + (cm[b - 1] if b < prof.n_layers else 0.0)
          for a, b in pairwise(bounds)]
    part = Partition(
        cuts=cuts, ppv=list(args.ppv), stage_costs=sc,
        stage_memory=[sum(memory[a:b]) for a, b in pairwise(bounds)],
        stage_comm=[cm[b - 1] if b < prof.n_layers else 0.0 for b in bounds[1:]],
    )
    if args.memory_limit is not None:
        for s, m in enumerate(part.stage_memory or []):
            if m > args.memory_limit:
                raise StalesimError(
                    f"--memory-limit: stage {s} of ppv {args.ppv} needs {m:.0f} bytes "
                    f"> {args.memory_limit:.0f}"
                )
    return part


def _stage_rows(prof: Profile, part: Partition, stages: int) -> list[dict[str, Any]]:
    """One row per stage: its blocks, their time and memory, and what it sends on."""
    bounds = [0, *part.cuts, prof.n_layers]
    stage_rows = []
    for s, (a, b) in enumerate(pairwise(bounds)):
        ls = prof.layers[a:b]
        stage_rows.append({
            "stage": s,
            "blocks": [lp.name for lp in ls],
            "weight_layers": sum(lp.weight_layers for lp in ls),
            "forward_s": sum(lp.forward_s for lp in ls),
            "backward_s": sum(lp.backward_s for lp in ls),
            "update_s": sum(lp.update_s for lp in ls),
            "comm_s": part.stage_comm[s] if part.stage_comm else 0.0,
            "time_s": part.stage_costs[s],
            "param_bytes": sum(lp.param_bytes for lp in ls),
            "saved_bytes": sum(lp.saved_bytes for lp in ls),
            "memory_bytes": (part.stage_memory or [0.0] * stages)[s],
            "output_bytes": ls[-1].output_bytes if b < prof.n_layers else 0,
        })
    return stage_rows


def _print_table(prof: Profile, stages: int, part: Partition, stage_rows: list[dict[str, Any]],
                 total: float) -> None:
    print(f"{prof.model}, batch {prof.batch_size}, S = {stages}: PPV ({', '.join(map(str, part.ppv))})"
          f"  cuts {part.cuts}")
    print(f"{'stage':>5} {'blocks':<22} {'WL':>3} {'time ms':>9} {'comm ms':>8} {'memory MiB':>11}")
    for r in stage_rows:
        names = r["blocks"]
        label = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]} ({len(names)})"
        print(f"{r['stage']:>5} {label:<22} {r['weight_layers']:>3} {r['time_s'] * 1e3:9.3f} "
              f"{r['comm_s'] * 1e3:8.3f} {r['memory_bytes'] / 2**20:11.2f}")
    # a profile whose stages all cost 0 (e.g. a hand-written one) has no speed-up to state
    sp = f"{total / part.bottleneck:.2f}x" if part.bottleneck > 0 else "n/a (the stages cost 0 s)"
    print(f"bottleneck: stage {part.bottleneck_stage} ({part.bottleneck * 1e3:.3f} ms of "
          f"{total * 1e3:.3f} ms total; ideal pipelined speed-up {sp})")
