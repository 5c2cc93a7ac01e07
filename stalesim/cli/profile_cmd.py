"""``stalesim profile``: measure per-block forward/backward/update costs of a model."""

from __future__ import annotations

import argparse
import sys

from stalesim.cli.common import nonneg_int, positive_int, print_json


def batch_sizes(text: str) -> list[int]:
    """argparse type: ``128`` or ``32,64,128`` (integers >= 1, no duplicates)."""
    parts = [p for p in text.replace(" ", "").split(",") if p]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or comma-separated integers >= 1, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"duplicate batch sizes in {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "profile",
        help="measure per-block forward/backward/update time, bytes and FLOPs",
        description=(
            "Run real training steps block by block and write the per-block profile "
            "(median seconds over --repeats after --warmup rounds) that the simulator and "
            "partitioner read. Several batch sizes (--batch-size 32,64,128) are all stored "
            "for interpolation."
        ),
    )
    p.add_argument("--model", required=True, help="zoo model name, e.g. lenet5, resnet20")
    p.add_argument("--batch-size", required=True, type=batch_sizes, metavar="B[,B...]")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:<i> (default cpu)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch CPU threads (default: torch's current setting)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed rounds (default 5)")
    p.add_argument("--warmup", type=nonneg_int, default=2, help="discarded rounds (default 2)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=0, help="model init and input seed")
    p.add_argument("--num-classes", type=positive_int, default=10)
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.json")
    p.add_argument("--json", action="store_true", help="also print the profile JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no table on stdout")
    p.set_defaults(func=run)


def _table(prof) -> str:  # type: ignore[no-untyped-def]
    lines = [f"{prof.model} on {prof.device} ({prof.meta.get('device_name', '')}), "
             f"{prof.dtype}, batch {prof.batch_size}, threads {prof.threads}, "
             f"median of {prof.repeats} repeats",
             f"{'block':<10} {'fwd ms':>9} {'bwd ms':>9} {'upd ms':>8} {'spread%':>8} "
             f"{'params KiB':>11} {'out KiB':>9} {'saved KiB':>10} {'MFLOP':>9}"]
    for lp in prof.layers:
        sp = lp.spread or {}
        rel = 0.0
        for key in ("forward_s", "backward_s"):
            s = sp.get(key)
            med = getattr(lp, key)
            if s and med > 0:
                rel = max(rel, (s["max"] - s["min"]) / med * 100)
        lines.append(
            f"{lp.name:<10} {lp.forward_s * 1e3:9.3f} {lp.backward_s * 1e3:9.3f} "
            f"{lp.update_s * 1e3:8.3f} {rel:8.1f} {lp.param_bytes / 1024:11.1f} "
            f"{lp.output_bytes / 1024:9.1f} {lp.saved_bytes / 1024:10.1f} {lp.flops / 1e6:9.1f}"
        )
    total = sum(lp.compute_s for lp in prof.layers)
    lines.append(f"sum of blocks {total * 1e3:.3f} ms; whole model {prof.whole_model_s * 1e3:.3f} ms;"
                 f" sum/whole = {prof.sum_over_whole_ratio:.3f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from stalesim.workloads.profiler import profile_model

    prof = profile_model(
        args.model,
        args.batch_size,
        device=args.device,
        threads=args.threads,
        repeats=args.repeats,
        warmup=args.warmup,
        dtype=args.dtype,
        seed=args.seed,
        num_classes=args.num_classes,
        progress=lambda msg: print(msg, file=sys.stderr),
    )
    prof.to_json(args.output)
    if args.json:
        print_json(prof.to_dict())
    elif not args.quiet:
        print(_table(prof))
        print(f"wrote {args.output}")
    return 0
