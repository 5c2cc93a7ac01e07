"""``stalesim calibrate``: measure the local link and write a hardware JSON (``--gemm``: the kernel
table; ``--calibration``: the executor's cost terms, :mod:`stalesim.cost.calibration`)."""

from __future__ import annotations

import argparse
import math
import sys

from stalesim.cli.common import int_list, int_type, rendezvous_seconds, write_json_atomic
from stalesim.limits import MAX_RANKS, MAX_REPEATS
from stalesim.units import fmt_bytes

# A fit or a model further off than this from what was measured is worth a warning: the
# simulator's communication times inherit the error (25 %: above the run-to-run noise of a
# quiet machine, below the 2x errors that change which schedule wins).
FIT_ERROR_BOUND = 0.25


def fit_warnings(data: dict, bound: float = FIT_ERROR_BOUND) -> list[str]:
    """One line per measurement its model misses by more than ``bound`` (relative)."""
    out = []
    err = data["link"].get("fit_max_rel_error")
    if err is not None and err > bound:
        out.append(f"the link fit t = latency + bytes / bandwidth is off by up to {err:.0%} at some message "
                   f"size (bound {bound:.0%}): a noisy machine or a link that is not alpha-beta; "
                   "simulated transfer times carry that error (re-run when the machine is quiet)")
    for m in data.get("allreduce", {}).get("measured", []):
        model, got = m.get("ring_model_s"), m.get("seconds")
        if model and got and max(got / model, model / got) > 1 + bound:
            out.append(f"all-reduce of {fmt_bytes(m['bytes'])} over {m['workers']} took {got / model:.2g}x "
                       f"its ring model (bound {bound:.0%}): simulated all-reduce times are off by as much")
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure link latency/bandwidth, all-reduce and CPU occupancy; write HW.json",
        description=(
            "Spawn local ranks, ping-pong messages of each size (default 4 B .. 16 MiB) and fit "
            "t = latency + bytes / bandwidth, time all-reduces, and (gloo) measure how busy a "
            "transfer keeps the CPU. Writes the hardware JSON that `simulate --hardware` reads."
        ),
    )
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default gloo")
    p.add_argument("--ranks", type=int_type(2, MAX_RANKS), default=None, help="default 2")
    p.add_argument("--devices", default=None, metavar="cpu:N|cuda:I,J,...",
                   help="the ranks' devices, one rank each (cuda:2,3 calibrates GPUs 2 and 3 over nccl); "
                        "sets the backend and the rank count (default: GPUs 0..ranks-1 for nccl)")
    p.add_argument("--sizes", type=int_list, default=None, metavar="BYTES[,BYTES...]",
                   help="message sizes in bytes (default 4,16,...,16777216)")
    p.add_argument("--repeats", type=int_type(1, MAX_REPEATS), default=5)
    p.add_argument("--timeout", type=rendezvous_seconds, default=120.0, metavar="SECONDS",
                   help="rendezvous / collective timeout per rank")
    p.add_argument("-o", "--output", required=True, metavar="HW.json")
    p.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="also measure the executor's cost terms on 2 local CPU ranks (per-action runtime "
                        "overhead, per-message CPU costs, the compute a message takes, the host's cores) and "
                        "write them here, for `simulate/sweep/plan --calibration` (gloo only)")
    p.add_argument("--gemm", action="store_true",
                   help="instead of the link: time matmuls and causal attention over a grid of shapes on this "
                        "machine's first GPU (a tiny dry grid on a CPU) and write the kernel-efficiency table "
                        "the LLM estimate reads (--repeats per shape)")
    p.add_argument("--gemm-device", default=None, metavar="CATALOG_KEY",
                   help="with --gemm: the catalog device whose peak the efficiencies divide by "
                        "(default: the GPU's own catalog entry)")
    p.set_defaults(func=run)


def run_gemm(args: argparse.Namespace) -> int:
    """``calibrate --gemm``: the kernel table of this machine (stalesim.workloads.kernel_calibration)."""
    from stalesim.atomic import check_output_file
    from stalesim.errors import StalesimError
    from stalesim.workloads.hardware import get_device
    from stalesim.workloads.kernel_calibration import measure_kernels

    if args.gemm_device is not None:  # an unknown key fails here, not after the grid
        try:
            get_device(args.gemm_device)
        except StalesimError as e:
            raise StalesimError(f"--gemm-device: {e}") from None
    check_output_file(args.output)
    print("timing matmul and attention shapes ...", file=sys.stderr)
    data = measure_kernels(args.gemm_device, repeats=args.repeats)
    write_json_atomic(args.output, data)
    effs = [r["efficiency"] for r in data["gemm"]]
    print(f"{data['device']} ({data['device_key']}, {data['dtype']}): {len(effs)} GEMM shapes at "
          f"{min(effs):.0%} .. {max(effs):.0%} of peak, {len(data['attention'])} attention shapes"
          + (" (CPU dry run: a format check, not a table to use)" if data["dry"] else ""))
    print(f"wrote {args.output}")
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "gemm", False):
        if getattr(args, "calibration", None):
            from stalesim.errors import StalesimError

            raise StalesimError("--calibration: measures the link's ranks, not --gemm's kernels (drop one)")
        return run_gemm(args)
    from stalesim.devices import parse_devices
    from stalesim.errors import StalesimError
    from stalesim.workloads.calibrate import calibrate, check_args, rank_devices

    devs = parse_devices(args.devices) if args.devices is not None else None
    backend = args.backend or (devs.backend if devs is not None else "gloo")
    ranks = args.ranks or (devs.count if devs is not None else 2)
    if args.calibration is not None and backend != "gloo":
        raise StalesimError("--calibration: measured on CPU ranks over gloo (on GPUs, validate measures the "
                            "executor's terms)")
    if devs is not None and (backend, ranks) != (devs.backend, devs.count):
        raise StalesimError(f"--devices: {devs} means {devs.count} {devs.backend} rank(s), "
                            f"not --backend {backend} --ranks {ranks}")
    check_args(backend, ranks, args.sizes, args.repeats, devs)
    where = rank_devices(backend, ranks, devs)
    from stalesim.atomic import check_output_file

    check_output_file(args.output)  # before measuring: a bad -o fails in a second, not after
    if args.calibration is not None:
        check_output_file(args.calibration)
    print(f"calibrating {backend} with {ranks} local ranks ({', '.join(where)}) ...", file=sys.stderr)
    from stalesim.progress import heartbeat

    with heartbeat("calibrating"):
        data = calibrate(backend, ranks, sizes=args.sizes, repeats=args.repeats,
                         timeout_s=args.timeout, devices=devs)
    write_json_atomic(args.output, data)
    link = data["link"]
    bw = link["bandwidth_Bps"]
    print(f"link: latency {link['latency_s'] * 1e6:.1f} us, bandwidth "
          f"{'unlimited' if bw is None or math.isinf(bw) else f'{bw / 1e9:.3f} GB/s'} "
          f"(fit max relative error {link['fit_max_rel_error']:.2f}; best case "
          f"{link['best_case']['latency_s'] * 1e6:.1f} us)")
    for m in data["allreduce"]["measured"]:
        print(f"all-reduce {m['bytes']:>9} B over {m['workers']}: {m['seconds'] * 1e3:8.3f} ms "
              f"(ring model {m['ring_model_s'] * 1e3:8.3f} ms)")
    print(f"comm overlaps compute: {data['comm_overlaps_compute']}; "
          f"CPU occupancy of a transfer: {data['cpu_comm_occupancy']:.2f}")
    for w in fit_warnings(data):
        print(f"stalesim: warning: {w}", file=sys.stderr)
    print(f"wrote {args.output}")
    if args.calibration is not None:
        run_calibration(args)
    return 0


def run_calibration(args: argparse.Namespace) -> None:
    """``calibrate --calibration``: the executor's cost terms on this machine
    (:func:`stalesim.cost.calibration.measure_calibration`), written for reuse."""
    from stalesim.cost.calibration import defaults_line, measure_calibration, write_calibration
    from stalesim.progress import heartbeat
    from stalesim.validate.steps import COMM_SIZES  # validate's sizes: the same fits

    print("measuring the executor's per-action and per-message costs (2 CPU ranks) ...", file=sys.stderr)
    with heartbeat("calibrating the executor"):
        cal = measure_calibration(COMM_SIZES, repeats=args.repeats, timeout_s=args.timeout)
    write_calibration(args.calibration, cal)
    over = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in cal.overhead_s.items())
    comm = cal.comm or {}
    msgs = (f"posting a send {comm['post']['alpha_s'] * 1e6:.0f} us, completing a receive "
            f"{comm['complete']['alpha_s'] * 1e6:.0f} us" if comm else "per-message costs not measured")
    print(f"per-action runtime overhead: {over}; {msgs}; host cores {cal.host_cores}")
    print(defaults_line(cal, args.calibration))
    print(f"wrote {args.calibration}")
