"""``stalesim simulate``: time, utilization, memory and trace of one configuration."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from stalesim.cli.cluster_args import add_cluster_args
from stalesim.cli.common import (
    add_extrapolate_arg,
    fraction,
    int_list,
    positive_int,
    print_json,
    seconds,
)
from stalesim.cli.llm_args import add_llm_args
from stalesim.cli.model_source import add_model_source_args, load_costs
from stalesim.cli.schedule_cmd import add_schedule_args
from stalesim.cli.train_args import add_schedule_file_arg

if TYPE_CHECKING:
    from stalesim.cost.calibration import MachineCalibration
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim.api import SimOptions
    from stalesim.sim.model import SimHardware, StageCosts
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.profile import Profile


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """Hardware flags shared with ``sweep`` (which takes lists of devices/links instead)."""
    p.add_argument("--hardware", default=None, metavar="HW.json",
                   help="hardware JSON (stalesim calibrate writes one); the profile is used as measured")
    p.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="this machine's calibrated cost terms (written by `stalesim calibrate --calibration`): "
                        "predict its ranks with the cost model validate predicts with")
    p.add_argument("--topology", choices=("p2p", "nic", "bus"), default=None,
                   help="link topology: p2p (a full-duplex link per device pair, default), "
                        "nic (one egress queue per device) or bus (one shared channel)")
    p.add_argument("--comm-overlap", choices=("yes", "no"), default=None,
                   help="override whether communication overlaps compute")
    p.add_argument("--cpu-comm-occupancy", type=fraction, default=None, metavar="F",
                   help="fraction of a transfer's time its cores are busy (no-overlap hardware)")


def resolve_cli_hardware(args: argparse.Namespace, profile: Profile, device: str | None,
                         link: str | None) -> tuple[Profile, SimHardware]:
    """(profile, SimHardware) from --hardware | --target/--node/--link | default (ideal link).

    Which profile times apply is one rule (:mod:`stalesim.workloads.retime`): a hardware JSON's
    device and a ``--node``'s device re-time the profile only when it is not for that device;
    ``--target`` asks for the roofline estimate. A profile without FLOPs is never re-timed.
    """
    from dataclasses import replace

    from stalesim.errors import StalesimError
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import get_link, hardware_from_catalog, load_hardware

    overlap = _overlap(args)
    occ = args.cpu_comm_occupancy
    if occ is not None and not 0 <= occ <= 1:
        raise StalesimError(f"--cpu-comm-occupancy: must be in [0, 1], got {occ}")
    topo = args.topology
    if args.hardware:
        if device or link:
            raise StalesimError("--hardware: give either a hardware JSON or --target/--link, not both")
        return _timed_for(args, profile, load_hardware(args.hardware), force=False)
    kind = device or getattr(args, "node_device", None)
    if kind:
        return _timed_for(args, profile, hardware_from_catalog(kind, link or "ideal"), force=bool(device))
    if link:
        lnk = get_link(link)
        cpu = "cpu" in profile.device.lower()
        ov = (not cpu) if overlap is None else overlap
        hw = SimHardware.from_link(profile.device, lnk, overlaps=ov,
                                   occupancy=(occ if occ is not None else (0.0 if ov else 1.0)),
                                   topology=topo or "p2p")
        return profile, hw
    hw = replace(SimHardware.ideal(profile.device), topology=topo or "p2p",
                 notes=("default: the profile's own device with an ideal link",))
    return profile, hw


def read_cli_calibration(args: argparse.Namespace) -> MachineCalibration | None:
    """``--calibration``'s terms (None without it), refused where they cannot apply: they were
    measured on this machine's local ranks, so a ``--target`` (another device, by roofline),
    a cluster or the closed form gets no terms carried over from here."""
    from stalesim.cost.calibration import read_calibration
    from stalesim.errors import StalesimError

    path = getattr(args, "calibration", None)
    if path is None:
        return None
    if getattr(args, "target", None) or getattr(args, "node", None):
        raise StalesimError("--calibration: measured on this machine's ranks; it does not carry over to "
                            "--target/--node (drop one)")
    if getattr(args, "method", "event") != "event":
        raise StalesimError("--calibration: the calibrated terms need the event simulation (--method event)")
    return read_calibration(path)


def _overlap(args: argparse.Namespace) -> bool | None:
    """--comm-overlap as a bool (None: the hardware's own)."""
    return None if args.comm_overlap is None else args.comm_overlap == "yes"


def _timed_for(args: argparse.Namespace, profile: Profile, hwc: Hardware, force: bool) -> tuple[Profile, SimHardware]:
    """The profile for ``hwc``'s device (re-timed by roofline when it is not for it, or when
    ``force``) and the SimHardware with the flags' topology, overlap and occupancy."""
    from dataclasses import replace

    from stalesim.sim.model import SimHardware
    from stalesim.workloads.retime import retime

    overlap = _overlap(args)
    prof = retime(profile, hwc.device, force=force)
    hw = SimHardware.from_hardware(hwc, topology=args.topology, comm_overlaps_compute=overlap,
                                   cpu_comm_occupancy=args.cpu_comm_occupancy)
    if prof is not profile:
        hw = replace(hw, notes=(f"compute estimated by roofline for {hwc.device.key or hwc.device.name} "
                                f"from the profile measured on {profile.device}",))
    return prof, hw


def register(sub: argparse._SubParsersAction) -> None:
    from stalesim.cli.flagcheck import catalog_type
    from stalesim.schedule import schedule_names

    p = sub.add_parser(
        "simulate", help="simulate a schedule: iteration time, speed-up, utilization, memory, trace",
        description="Replay a schedule's per-device action lists in a SimPy event simulation "
                    "(or the closed-form fast path) with per-layer costs from a profile and an "
                    "alpha-beta link model. Default hardware: the profile's own device with an "
                    "ideal link.")
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="per-layer profile (or --model NAME, or --workload NAME: an analytic transformer)")
    add_model_source_args(p)
    p.add_argument("--schedule", default=None, metavar="NAME",
                   help=f"one of: {', '.join(schedule_names())} (or --schedule-file)")
    add_schedule_file_arg(p)
    add_schedule_args(p)
    p.add_argument("--ppv", type=int_list, default=None,
                   help="pipeline placement vector (weight layers before each register), e.g. 2,5")
    p.add_argument("--batch-size", "-B", type=positive_int, default=None,
                   help="mini-batch size (default: the profile's)")
    p.add_argument("--target", type=catalog_type("device"), default=None, metavar="KIND",
                   help="catalog device to predict for: compute times estimated by roofline "
                        "from the profile (default: the profile's own device)")
    p.add_argument("--link", type=catalog_type("link"), default=None, metavar="KIND",
                   help="catalog link (ideal = free)")
    add_hardware_args(p)
    add_cluster_args(p)
    p.add_argument("--method", choices=("event", "fast"), default="event",
                   help="event simulation (default) or the closed-form fast path")
    p.add_argument("--loss-time", type=seconds, default=0.0, metavar="SECONDS",
                   help="time of one LOSS at the full batch (default 0: negligible)")
    add_extrapolate_arg(p)
    add_llm_args(p)
    p.add_argument("--dp", type=positive_int, dest="workers", default=argparse.SUPPRESS, metavar="P",
                   help="alias of -P: the data-parallel degree")
    p.add_argument("--basis-rotation", action="store_true",
                   help="price basis rotation (Adam in each matrix's eigenbasis): its factors in each stage's "
                        "optimizer state (with Adam's two moments) and its matrix products in each update")
    p.add_argument("--basis-rotation-freq", type=positive_int, default=10, metavar="K",
                   help="with --basis-rotation: eigenbasis refresh every K updates (default 10)")
    p.add_argument("--basis-rotation-max-dim", type=positive_int, default=10_000, metavar="N",
                   help="with --basis-rotation: matrix sides longer than N are not rotated")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--trace", default=None, metavar="T.json", help="write a Chrome trace (Perfetto)")
    p.add_argument("--plot", default=None, metavar="G.png", help="write a Gantt chart (.png/.svg/.pdf)")
    p.set_defaults(func=run)
    from stalesim.cli.flagcheck import declare

    declare("simulate", p)  # its defaults tell the flag checks which flags were given


def run(args: argparse.Namespace) -> int:
    from stalesim.cli.cluster_args import attach_cluster, cluster_link_defaults, cluster_options
    from stalesim.cli.llm_args import check_llm_flags
    from stalesim.cli.schedule_cmd import config_from_args
    from stalesim.cost.apply import predict
    from stalesim.cost.calibration import default_terms, defaults_line
    from stalesim.errors import StalesimError
    from stalesim.schedule import get_spec
    from stalesim.sim import SimOptions, simulate

    if args.batch_size is not None and args.batch_size < 1:
        raise StalesimError(f"--batch-size: must be >= 1, got {args.batch_size}")
    check_llm_flags(args)
    if args.workload is not None:
        if args.model is not None:
            raise StalesimError("--model: give --workload (an analytic transformer) or --model, not both")
        if args.schedule is None:
            raise StalesimError("--schedule: required (a schedule name)")
        return _run_workload(args)
    if (args.trace or args.plot) and args.method == "fast":
        raise StalesimError("--trace/--plot: need the event simulation (drop --method fast)")
    if args.schedule_file is not None:
        cfg: Any = _file_schedule(args)
        replicas = 1
    else:
        if args.schedule is None:
            raise StalesimError("--schedule: required (a schedule name, or --schedule-file FILE)")
        stages = args.stages
        if stages is None:
            stages = len(args.ppv) + 1 if args.ppv is not None else 1
        # -P is the data-parallel degree: dp/pipe-sgd workers, or replicas of a pipeline schedule
        replicas = 1
        if not get_spec(args.schedule).data_parallel:
            replicas, args = args.workers, argparse.Namespace(**{**vars(args), "workers": 1})
        cfg = config_from_args(args, stages=stages)
    opts = SimOptions(ppv=None if args.ppv is None else tuple(args.ppv), batch_size=args.batch_size,
                      method=args.method, loss_s=args.loss_time, replicas=replicas,
                      **cluster_options(args))
    opts.check()
    cal = read_cli_calibration(args)  # before the profile: a flag it cannot apply to fails first
    prof = load_costs(args, args.batch_size).with_extrapolation(args.extrapolate)
    cluster_link_defaults(args)
    prof, hw = resolve_cli_hardware(args, prof, args.target, args.link)
    hw = attach_cluster(args, hw)
    rotation = _rotation_costs(args, prof, cfg, opts) if args.basis_rotation else None
    if cal is not None and (rotation or args.schedule_file is not None):
        raise StalesimError("--calibration: not with --basis-rotation or --schedule-file")
    r = simulate(rotation[1], cfg, hw, opts) if rotation else predict(prof, cal, cfg, hw, opts)
    written: dict = {}
    if rotation:  # what the mitigation adds per stage, beside the result
        base, priced = rotation
        written["basis_rotation"] = {
            "optimizer_state_bytes": list(priced.optimizer_bytes),
            "factor_bytes": [o - 2 * p for o, p in zip(priced.optimizer_bytes, base.param_bytes)],
            "update_extra_s": [(a - b) / 1e9 for a, b in zip(priced.u_ns, base.u_ns)]}
    if args.trace:
        written["trace"] = str(r.write_trace(args.trace))
    if args.plot:
        written["plot"] = str(r.plot(args.plot))
    if args.json:
        d = r.to_dict()
        d.update(written)
        d["cost_terms_at_default"] = default_terms(cal)
        print_json(d)
        for w in r.warnings:  # stdout stays one JSON object; warnings are never silent
            print(f"stalesim: warning: {w}", file=sys.stderr)
    else:
        print(r.summary())
        print(defaults_line(cal))
        for k, v in written.items():
            if k == "basis_rotation":
                mib = ", ".join(f"{b / 2**20:.3g}" for b in v["factor_bytes"])
                us = ", ".join(f"{x * 1e6:.3g}" for x in v["update_extra_s"])
                print(f"basis rotation   per stage +[{mib}] MiB of factors (beside Adam's two moments), "
                      f"+[{us}] us per update")
            else:
                print(f"{k}: {v}")
    return 0


# a torch CSV is one flushed step: simulated this many times (a steady state to measure)
CSV_BATCHES = 4


def _file_schedule(args: argparse.Namespace) -> Any:
    """The built schedule of ``--schedule-file`` (the file fixes its shape: the flags that
    would shape a registered schedule are refused, not silently ignored)."""
    from stalesim.errors import StalesimError
    from stalesim.schedule.userfile import load_schedule_file

    if args.schedule is not None:
        raise StalesimError("--schedule-file: give a schedule name or a schedule file, not both")
    shaping = [f for f, v in (("--stages", args.stages), ("--fold", args.fold), ("--switch", args.switch),
                              ("--stages-per-device", args.stages_per_device)) if v is not None]
    shaping += [f for f, v in (("--microbatches", args.microbatches != 1), ("--workers", args.workers != 1),
                               ("--warmup", args.warmup != 0)) if v]
    if shaping:
        raise StalesimError(f"{shaping[0]}: the schedule file fixes the order; drop it")
    batches = args.batches
    if batches is None and str(args.schedule_file).lower().endswith(".csv"):
        batches = CSV_BATCHES
    return load_schedule_file(args.schedule_file, batches)


def _rotation_costs(args: argparse.Namespace, prof: Profile, cfg: ScheduleConfig,
                    opts: SimOptions) -> tuple[StageCosts, StageCosts]:
    """The profile's stage costs, without and with basis rotation's state and update time
    (:mod:`stalesim.sim.rotation_cost`)."""
    from stalesim.errors import StalesimError
    from stalesim.schedule import build_schedule
    from stalesim.sim.model import resolve_cuts, stage_costs
    from stalesim.sim.rotation_cost import with_basis_rotation

    if opts.replicas > 1 or getattr(args, "node", None):
        raise StalesimError("basis_rotation: priced for one pipeline; drop --replicas/--node")
    B = opts.batch_size or prof.batch_size
    ab = build_schedule(cfg).action_batch_size(B)
    cuts, ppv = resolve_cuts(prof, cfg.stages, opts.ppv, B)
    costs = stage_costs(prof, cuts, batch_size=B, action_batch=ab, loss_s=opts.loss_s, ppv=ppv)
    return costs, with_basis_rotation(costs, prof, freq=args.basis_rotation_freq,
                                      max_dim=args.basis_rotation_max_dim)


def _run_workload(args: argparse.Namespace) -> int:
    """``--workload`` / ``--model-spec``: the LLM estimate (stalesim.sim.parallel.predict_llm) and
    the range over the choices the flags leave open (stalesim.sim.llm_range)."""
    from stalesim.cli.flagcheck import check_plan, flag_error
    from stalesim.cli.llm_args import FIRST_LAST, llm_hardware, open_choices, plan_from_args, workload_spec
    from stalesim.errors import StalesimError
    from stalesim.sim.llm_range import choice_range
    from stalesim.sim.parallel import predict_llm

    spec = workload_spec(args)
    hw = llm_hardware(args)
    try:
        plan = plan_from_args(args, spec)
        check_plan(plan, spec, hw)  # every combination, before anything is predicted
    except StalesimError as exc:
        raise flag_error("simulate", exc) from None
    p = predict_llm(spec, plan, hw)
    rng = choice_range(spec, plan, hw, open_choices(args), first_last=args.stage_layers == FIRST_LAST)
    if args.json:
        print_json({**p.to_dict(), "range": rng.to_dict()})
    else:
        print(p.summary())
        if plan.cp > 1 or plan.stage_layers is not None:  # what the summary's degree line leaves out
            split = "even" if plan.stage_layers is None else ",".join(map(str, plan.stage_layers))
            print(f"context parallel {plan.cp} (GPUs = tp x cp x pp x dp = {plan.gpus}); layers per stage: {split}")
        print(rng.summary())
    return 0
