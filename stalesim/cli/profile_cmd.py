"""``stalesim profile``: measure per-block forward/backward/update costs of a model."""

from __future__ import annotations

import argparse
import sys
import warnings

from stalesim.cli.common import DEFAULT_THREADS, int_type, print_json, seconds, seed_int
from stalesim.errors import StalesimError
from stalesim.limits import MAX_COUNT, MAX_REPEATS, MAX_THREADS
from stalesim.workloads.zoo_facts import MAX_CLASSES


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
    if any(v > MAX_COUNT for v in values):
        raise argparse.ArgumentTypeError(f"{max(values)} is larger than this tool handles (at most {MAX_COUNT:,})")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"duplicate batch sizes in {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
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
    p.add_argument("--model", help="zoo model name, e.g. lenet5, resnet20, or your own as "
                   "pkg.module:factory (docs/api.md)")
    p.add_argument("--dataset", default=None,
                   help="your own model's input shape comes from this data set when the model does "
                        "not state one (mnist, cifar10, or pkg.module:factory)")
    p.add_argument("--batch-size", type=batch_sizes, metavar="B[,B...]",
                   help="batch size(s) to measure (with --roofline: rescale to this one)")
    p.add_argument("--roofline", metavar="DEVICE", default=None,
                   help="instead of measuring, estimate --from PROFILE.json on a catalog device "
                        "(e.g. h100-sxm) with the roofline model")
    p.add_argument("--from", dest="from_profile", metavar="PROFILE.json", default=None,
                   help="the measured profile --roofline starts from (FLOPs and bytes)")
    p.add_argument("--launch-overhead", type=seconds, default=None, metavar="SECONDS",
                   help="roofline: fixed per-phase overhead per block (default 5e-6)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:<i> (default cpu)")
    p.add_argument("--threads", type=int_type(1, MAX_THREADS), default=DEFAULT_THREADS,
                   help=f"torch CPU threads (default {DEFAULT_THREADS}: what each executor rank runs, "
                        "and stalesim.profile's default, so the profile times the ranks' work)")
    p.add_argument("--repeats", type=int_type(1, MAX_REPEATS), default=5, help="timed rounds (default 5)")
    p.add_argument("--warmup", type=int_type(0, MAX_REPEATS), default=2, help="discarded rounds (default 2)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "tf32"],
                   help="float32 (default) or bfloat16; roofline also takes tf32")
    p.add_argument("--seed", type=seed_int, default=0, help="model init and input seed")
    p.add_argument("--num-classes", type=int_type(1, MAX_CLASSES), default=10)
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.json")
    p.add_argument("--json", action="store_true", help="also print the profile JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no table on stdout")
    p.set_defaults(func=run)


def _table(prof) -> str:  # type: ignore[no-untyped-def]
    title = (f"{prof.model} on {prof.device} ({prof.meta.get('device_name', '')}), "
             f"{prof.dtype}, batch {prof.batch_size}, threads {prof.threads}, "
             f"median of {prof.repeats} repeats")
    header = (f"{'block':<10} {'fwd ms':>9} {'bwd ms':>9} {'upd ms':>8} {'IQR %':>7} "
              f"{'params KiB':>11} {'out KiB':>9} {'saved KiB':>10} {'MFLOP':>9}")
    lines = [title, header]
    for lp in prof.layers:
        sp = lp.spread or {}
        rel = 0.0
        for key in ("forward_s", "backward_s"):
            s = sp.get(key)
            med = getattr(lp, key)
            if s and med > 0:
                rel = max(rel, s["iqr"] / med * 100)
        lines.append(
            f"{lp.name:<10} {lp.forward_s * 1e3:9.3f} {lp.backward_s * 1e3:9.3f} "
            f"{lp.update_s * 1e3:8.3f} {rel:7.1f} {lp.param_bytes / 1024:11.1f} "
            f"{lp.output_bytes / 1024:9.1f} {lp.saved_bytes / 1024:10.1f} {lp.flops / 1e6:9.1f}"
        )
    total = sum(lp.compute_s for lp in prof.layers)
    lines.append("IQR % = larger of forward/backward interquartile range over the median")
    load = prof.meta.get("loadavg_1min")
    if load and load[0] is not None:
        lines.append(f"1-min load average before/after: {load[0]}/{load[1]} "
                     f"on {prof.meta.get('cpu_count')} CPUs (other work inflates the spread)")
    lines.append(f"sum of blocks {total * 1e3:.3f} ms; whole model {prof.whole_model_s * 1e3:.3f} ms;"
                 f" sum/whole = {prof.sum_over_whole_ratio:.3f}")
    return "\n".join(lines)


def _run_roofline(args: argparse.Namespace) -> int:
    from stalesim.workloads.hardware import DEFAULT_LAUNCH_OVERHEAD_S, roofline_profile
    from stalesim.workloads.profile import load_profile

    if not args.from_profile:
        raise StalesimError("--roofline: needs --from PROFILE.json (the FLOPs and bytes to use)")
    if args.model:
        raise StalesimError("--roofline: the model comes from --from; drop --model")
    src = load_profile(args.from_profile)
    if args.batch_size:
        if len(args.batch_size) != 1:
            raise StalesimError("--batch-size: --roofline takes a single batch size")
        src = src.at_batch_size(args.batch_size[0])
    overhead = DEFAULT_LAUNCH_OVERHEAD_S if args.launch_overhead is None else args.launch_overhead
    prof = roofline_profile(src, args.roofline, args.dtype, launch_overhead_s=overhead)
    prof.to_json(args.output)
    if args.json:
        print_json(prof.to_dict())
    elif not args.quiet:
        total = sum(prof.costs())
        print(f"{prof.model} on {prof.device}, {prof.dtype}, batch {prof.batch_size}: "
              f"{total * 1e3:.3f} ms per step (sum of blocks, roofline)")
        print(f"wrote {args.output}")
    return 0


def run(args: argparse.Namespace) -> int:
    from stalesim.atomic import check_output_file

    check_output_file(args.output)  # before measuring: a bad -o fails in a second, not after
    if args.roofline:
        return _run_roofline(args)
    if args.from_profile:
        raise StalesimError("--from: only used with --roofline DEVICE")
    if not args.model:
        raise StalesimError("--model: required (or --roofline DEVICE --from PROFILE.json)")
    if not args.batch_size:
        raise StalesimError("--batch-size: required when measuring")
    if args.dtype == "tf32":
        raise StalesimError("--dtype: tf32 is only a roofline setting; measure float32")
    from stalesim.plugins import is_plugin
    from stalesim.workloads.profiler import parse_device, profile_model
    from stalesim.workloads.zoo_facts import model_facts, model_names

    model = args.model
    if is_plugin(args.model):  # the user's model: imported, built and checked now
        from stalesim.runtime.build import own_model

        model = own_model(args.model, args.dataset, seed=args.seed)
    elif args.dataset is not None:
        raise StalesimError("--dataset: only your own model (pkg.module:factory) takes its input shape "
                            "from a data set; a zoo model has its own")
    elif model_facts(args.model) is None:  # before torch builds anything
        raise StalesimError(f"--model: unknown {args.model!r} (known: {', '.join(model_names())}, "
                            "or any resnet<6n+2>, or your own as pkg.module:factory)")
    parse_device(args.device)
    from stalesim.runtime.preflight import check_memory, estimate_model

    # weights, gradients and one batch's activations at the largest batch size, before building
    check_memory(estimate_model(args.model, batch_size=max(args.batch_size),
                                element_size=2 if args.dtype == "bfloat16" else 4, optimizer_copies=0,
                                num_classes=args.num_classes),
                 f"profiling {args.model} at batch size {max(args.batch_size)}", device=args.device)
    from stalesim.progress import heartbeat

    # a profile of a big model is minutes of silence otherwise (no count to report inside)
    from stalesim.workloads.profiler import BlockSumWarning

    with heartbeat(f"profiling {args.model}"), \
            warnings.catch_warnings(record=True) as caught:
        # stderr, as the per-batch-size lines (-q quiets stdout); the block-sum warning as one line
        warnings.simplefilter("always", BlockSumWarning)  # every profile, not once per process
        prof = profile_model(
            model,
            args.batch_size,
            device=args.device,
            threads=args.threads,
            repeats=args.repeats,
            warmup=args.warmup,
            dtype=args.dtype or "float32",
            seed=args.seed,
            num_classes=args.num_classes,
            progress=lambda msg: print(msg, file=sys.stderr),
        )
    for w in caught:
        if issubclass(w.category, BlockSumWarning):
            print(f"stalesim: warning: {w.message}", file=sys.stderr)
        else:  # anything else torch or the model said, as it would have shown
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    prof.to_json(args.output)
    if args.json:
        print_json(prof.to_dict())
    elif not args.quiet:
        print(_table(prof))
        print(f"wrote {args.output}")
    return 0
