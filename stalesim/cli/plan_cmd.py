"""``stalesim plan``: which schedule reaches the target first on the user's hardware
(emulated iterations to target x simulated iteration time; docs/plan.md). With
``--workload`` (an analytic transformer, :mod:`stalesim.plan.llm`): schedules and error
feedback ranked by predicted time per iteration and memory per GPU, in seconds."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stalesim.cli.cluster_args import add_cluster_args
from stalesim.cli.common import (
    float_type,
    fraction,
    int_type,
    nonneg_float,
    positive_float,
    positive_int,
    print_json,
)
from stalesim.cli.launch_args import add_launcher_args, launch_spec_from_args, refuse_launcher_flags, tensorboard_dir
from stalesim.cli.llm_args import add_llm_args
from stalesim.cli.simulate_cmd import add_hardware_args
from stalesim.cli.train_args import DATASET_HELP, MODEL_HELP
from stalesim.errors import StalesimError
from stalesim.limits import MAX_COUNT, MAX_JOBS, MAX_SEED

if TYPE_CHECKING:
    from stalesim.plan.candidates import GridRequest
    from stalesim.plan.workflow import Plan, PlanRequest
    from stalesim.runtime.config import TrainConfig
    from stalesim.workloads.profile import Profile

# a device of at most 1 PiB
_gib = float_type(0.0, 2.0**20, lo_open=True)
_loss = float_type(0.0, 1e6, lo_open=True)


def _csv(text: str) -> list[str]:
    items = [p.strip() for p in text.split(",")]
    if not all(items) or len(items) > 1000:
        raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text!r}")
    return items


def _ints(lo: int, hi: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers in [lo, hi]."""
    def parse(text: str) -> list[int]:
        try:
            vals = [int(p) for p in _csv(text)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
        bad = [v for v in vals if not lo <= v <= hi]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]} is outside [{lo}, {hi:,}]")
        return vals

    parse.__name__ = "comma-separated integers"
    return parse


_count = int_type(1, 4096)


def _device_count(text: str) -> int:
    """``8`` or ``cpu:8`` (how ``run --devices`` names CPU ranks): the number of devices."""
    kind, sep, n = text.strip().partition(":")
    if sep and kind != "cpu":
        raise argparse.ArgumentTypeError(f"expected a device count or cpu:N, got {text!r}")
    return _count(n if sep else kind)


_device_count.bounds = _count.bounds  # type: ignore[attr-defined]  # read by the CLI fuzz test


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="rank schedules by predicted time to a target loss/accuracy on given hardware",
        description="Emulate each candidate schedule's convergence here (seeds, stored in --out and "
                    "reused), simulate its iteration time and memory per device on the target, and rank "
                    "by time to target = iterations to target x iteration time. Writes plan.json, "
                    "plan.csv and pareto.png in --out.")
    from stalesim.cli.flagcheck import catalog_type

    t = p.add_mutually_exclusive_group()
    t.add_argument("--target-loss", type=_loss, default=None, metavar="L",
                   help="training loss to reach (mean of the last --smooth iterations)")
    t.add_argument("--target-accuracy", type=fraction, default=None, metavar="A",
                   help="test accuracy to reach, in [0, 1] (evaluated at epoch ends)")
    p.add_argument("--smooth", type=int_type(1, 10_000), default=20,
                   help="iterations the loss is averaged over (default 20)")
    p.add_argument("--devices", type=_device_count, required=True, metavar="D",
                   help="devices on the target: a count, or cpu:D (pipelines of D stages, D data-parallel "
                        "workers; --check runs them as D CPU ranks); with --workload the GPUs in all "
                        "(dp = D / (tp x pp))")
    _training_args(p)
    _candidate_args(p)
    h = p.add_argument_group("target hardware (as `simulate` takes it)")
    h.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="per-layer costs (default: measured here on the CPU, stored in --out)")
    h.add_argument("--target", type=catalog_type("device"), default=None, metavar="KIND",
                   help="catalog device (roofline from the profile)")
    h.add_argument("--link", type=catalog_type("link"), default=None, metavar="KIND", help="catalog link")
    add_hardware_args(h)
    add_cluster_args(p, replicas_alias=False)
    h.add_argument("--device-memory", type=_gib, default=None, metavar="GIB",
                   help="memory per device in GiB (default: the catalog device's)")
    h.add_argument("--time-error", type=fraction, default=0.10,
                   help="relative error of a predicted iteration time (default 0.10, docs/plan.md)")
    h.add_argument("--method", choices=("event", "fast"), default="event", help="simulation method")
    p.add_argument("--check", type=int_type(1, 16), default=None, metavar="K",
                   help="then run the K best-ranked schedules on cpu:DEVICES with the executor to the "
                        "target and compare measured with predicted time (a plan for this machine: "
                        "--profile measured here, --hardware from `stalesim calibrate`)")
    p.add_argument("--check-timeout", type=int_type(10, 86_400), default=600, metavar="SECONDS",
                   help="per checked run (default 600)")
    p.add_argument("--out", default=None,
                   help="plan folder (emulations are stored and reused here; required but with --workload)")
    add_llm_args(p)
    p.add_argument("--json", action="store_true", help="print plan.json")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_launcher_args(p)  # where the candidates' emulations run
    p.set_defaults(func=run)
    from stalesim.cli.flagcheck import declare

    declare("plan", p)  # its defaults tell the flag checks which flags were given


def _training_args(p: argparse.ArgumentParser) -> None:
    """How each candidate's emulations train (the same for every candidate)."""
    from stalesim.cli.flagcheck import choice_type, list_of
    from stalesim.runtime.config import OPTIMIZERS

    w = p.add_argument_group("training (the emulations)")
    w.add_argument("--model", default=None, help=MODEL_HELP + " (default lenet5)")
    w.add_argument("--dataset", default=None, help=DATASET_HELP)
    w.add_argument("--data-dir", default=None, help="dataset root (default $STALESIM_DATA)")
    w.add_argument("--batch-size", type=positive_int, default=None,
                   help="global mini-batch size (default 128; with --workload, sequences: default "
                        "dp x micro-batch x M)")
    w.add_argument("--lr", type=positive_float, default=0.01)
    w.add_argument("--momentum", type=nonneg_float, default=0.9)
    w.add_argument("--weight-decay", type=nonneg_float, default=0.0)
    w.add_argument("--optimizers", type=list_of(choice_type(OPTIMIZERS, "optimizer")), default=None,
                   help="comma-separated: sgd, adam, adamw (default sgd)")
    w.add_argument("--synthetic-size", type=positive_int, default=1024, help="synthetic dataset samples")
    w.add_argument("--emulate-device", default="cpu", help="where the emulations run: cpu | cuda[:N]")
    w.add_argument("--seeds", type=_ints(0, MAX_SEED), default=[0, 1, 2], help="seeds (default 0,1,2)")
    w.add_argument("--iterations", type=int_type(1, MAX_COUNT), default=None,
                   help="first horizon of a loss target (default 200; doubled while needed)")
    w.add_argument("--epochs", type=int_type(1, 1000), default=None,
                   help="first horizon of an accuracy target (default 1; doubled while needed)")
    w.add_argument("--max-horizon", type=int_type(1, MAX_COUNT), default=None,
                   help="the longest horizon, in the same unit (default 8 x the first)")
    w.add_argument("--jobs", type=int_type(1, MAX_JOBS), default=1, help="emulations in parallel")
    w.add_argument("--batched", action="store_true",
                   help="train the seeds and mitigations of a shape together (study --batched); each "
                        "reached candidate's crossing is then confirmed by single emulations")


def _candidate_args(p: argparse.ArgumentParser) -> None:
    """Which schedules, mitigations, warm-ups and switches are candidates."""
    from stalesim.cli.flagcheck import choice_type, list_of
    from stalesim.schedule import schedule_names

    g = p.add_argument_group("candidates")
    g.add_argument("--schedules", type=list_of(choice_type(schedule_names, "schedule")), default=None,
                   help="comma-separated schedules (default: every registered one that fits)")
    g.add_argument("--mitigations", type=_csv, default=["none"],
                   help="for schedules with staleness: comma-separated names (see `study`), or 'all' "
                        "(every one that applies to the optimizer; the others are listed as skipped); "
                        "default none, to keep the default grid small")
    g.add_argument("--microbatches", "-M", type=positive_int, default=0,
                   help="micro-batches of the micro-batch schedules (default 2 x devices; with --workload "
                        "per replica, default 2 x pp)")
    g.add_argument("--warmups", type=_ints(0, MAX_COUNT), default=None,
                   help="synchronous warm-up lengths searched (default 0 and a tenth of the first horizon)")
    g.add_argument("--switches", type=_ints(1, MAX_COUNT), default=None,
                   help="hybrid switch points searched (default a quarter and a half of the first horizon)")


def _base_config(args: argparse.Namespace, horizon: int, accuracy: bool) -> TrainConfig:
    from stalesim.plugins import is_plugin
    from stalesim.runtime.config import TrainConfig
    from stalesim.workloads.zoo_facts import model_facts, model_names

    facts = model_facts(args.model)
    if facts is None and not is_plugin(args.model):
        raise StalesimError(f"model: unknown {args.model!r} (known: {', '.join(model_names())}, "
                            "or any resnet<6n+2>, or your own as pkg.module:factory)")
    default_dataset = facts.default_dataset if facts is not None else "synthetic"
    for opt in args.optimizers:
        TrainConfig(optimizer=opt, iterations=1)._check_optimizer()
    from stalesim.runtime.build import check_own_code

    cfg = TrainConfig(model=args.model, dataset=args.dataset or default_dataset, schedule="sequential",
                      batch_size=args.batch_size, lr=args.lr, momentum=args.momentum,
                      weight_decay=args.weight_decay, device=args.emulate_device, data_dir=args.data_dir,
                      synthetic_size=args.synthetic_size, optimizer=args.optimizers[0],
                      iterations=None if accuracy else horizon, epochs=horizon if accuracy else None).check_runnable()
    check_own_code(cfg)  # the user's --model/--dataset, if any, before any emulation starts
    return cfg


def _profile(args: argparse.Namespace, out: Path, sizes: list[int]) -> Profile:
    """The --profile given, or one measured here (stored in --out and reused)."""
    from stalesim.workloads.profile import load_profile

    if args.profile:
        return load_profile(args.profile)
    path = out / "profiles" / f"{args.model.replace(':', '_').replace(',', '_')}_b{'-'.join(map(str, sizes))}.json"
    if path.is_file():
        return load_profile(path)
    from stalesim.atomic import ensure_dir
    from stalesim.workloads.profiler import profile_model

    print(f"plan: profiling {args.model} here at batch sizes {sizes} (stored in {path})", file=sys.stderr)
    from stalesim.runtime.build import model_of

    prof = profile_model(model_of(args.model, args.dataset), sizes, device="cpu", repeats=5, warmup=2,
                         progress=lambda msg: print(msg, file=sys.stderr))
    ensure_dir(path.parent)
    prof.to_json(path)
    return prof


def _check(args: argparse.Namespace, plan: Plan, req: PlanRequest) -> None:
    from stalesim.atomic import write_json_atomic, write_text_atomic
    from stalesim.plan.check import GOAL, check_rows, markdown, pick

    rows = pick(plan.rows, args.check, args.devices)
    if not rows:
        raise StalesimError(f"check: no ranked candidate on {args.devices} devices reached the target")
    recs = check_rows(rows, req.base, req.target, req.seeds[0], devices=args.devices,
                      timeout_s=args.check_timeout)
    folder = req.out / "check"
    write_json_atomic(folder / "check.json", {"command": "stalesim " + " ".join(sys.argv[1:]), "goal": GOAL,
                                              "asked": args.check, "checked": len(recs), "records": recs})
    write_text_atomic(folder / "check.md", markdown(recs))
    print(markdown(recs), end="")
    if len(recs) < args.check:
        print(f"check: only {len(recs)} ranked schedule(s) on {args.devices} devices to check")


def run(args: argparse.Namespace) -> int:
    from stalesim.atomic import check_writable_dir
    from stalesim.plan.workflow import make_plan

    if args.workload is not None:
        refuse_launcher_flags(args, "--workload (nothing is emulated)")
        return _run_workload(args)
    _check_emulation_flags(args)
    accuracy = args.target_accuracy is not None
    horizon = (args.epochs or 1) if accuracy else (args.iterations or 200)
    max_h = args.max_horizon or 8 * horizon
    if max_h < horizon:
        raise StalesimError(f"max_horizon: {max_h} is shorter than the first horizon {horizon}")
    _resolve_mitigations(args)
    _check_emulate_device(args.emulate_device)
    launch, tb = launch_spec_from_args(args, device=args.emulate_device), tensorboard_dir(args)
    _check_check_flags(args, accuracy)  # flags only: checked before any profile or hardware is read
    out = check_writable_dir(Path(args.out))
    base = _base_config(args, horizon, accuracy)
    req = _plan_request(args, base, out, horizon, max_h)
    req.launcher, req.tensorboard = launch, tb
    plan = make_plan(req)
    if args.check:
        _check(args, plan, req)
    _print_plan(args, plan, out)
    return 0


def _check_emulation_flags(args: argparse.Namespace) -> None:
    """The flags of an emulated plan (no --workload), with the defaults of the left-out ones filled in."""
    from stalesim.cli.flagcheck import check_modes

    check_modes("plan", args)  # the LLM flags, read off the parser
    if args.out is None:
        raise StalesimError("out: give --out FOLDER (emulations are stored and reused there)")
    args.model = args.model or "lenet5"
    args.batch_size = args.batch_size or 128
    args.optimizers = args.optimizers or ["sgd"]
    if args.target_loss is None and args.target_accuracy is None:
        raise StalesimError("target: give --target-loss L or --target-accuracy A")
    accuracy = args.target_accuracy is not None
    if accuracy and args.iterations is not None:
        raise StalesimError("iterations: an accuracy target is evaluated at epoch ends; use --epochs")
    if not accuracy and args.epochs is not None:
        raise StalesimError("epochs: a loss target is followed per iteration; use --iterations")


def _resolve_mitigations(args: argparse.Namespace) -> None:
    """Expand --mitigations all to the priced ones; refuse an unpriced one by name."""
    from stalesim.plan.candidates import UNPRICED_MITIGATIONS, mitigation_fields

    if "all" in args.mitigations:
        from stalesim.emulator.study import MITIGATIONS

        args.mitigations = [m for m in MITIGATIONS if m not in UNPRICED_MITIGATIONS]
    for m in args.mitigations:
        mitigation_fields(m)
        if m in UNPRICED_MITIGATIONS:
            raise StalesimError(f"mitigations: plan does not price {m}'s state and update time; compare it with "
                                "study and price it with simulate --basis-rotation")


def _check_emulate_device(dev: str) -> None:
    if not (dev == "cpu" or dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise StalesimError(f"emulate_device: expected cpu or cuda[:N], got {dev!r}")
    if dev.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise StalesimError(f"emulate_device: {dev} requested but no CUDA device is visible")


def _check_check_flags(args: argparse.Namespace, accuracy: bool) -> None:
    """--check runs the plan on this machine's CPU ranks: only a loss target of this machine."""
    if args.check and accuracy:
        raise StalesimError("check: compares time to a loss target; use --target-loss")
    if args.check and (args.target or args.node):
        raise StalesimError("check: runs on this machine's CPU ranks, so it checks a plan of this machine "
                            "(--profile measured here, --hardware from `stalesim calibrate`), not --target/--node")
    if args.check and args.devices > 64:
        raise StalesimError(f"check: runs {args.devices} CPU ranks on this machine; at most 64")


def _grid_request(args: argparse.Namespace, horizon: int, accuracy: bool) -> GridRequest:
    """The candidates: the flags' schedules and mitigations, and the warm-ups and switch
    points searched (by default a tenth, and a quarter and a half, of a loss target's first horizon)."""
    from stalesim.plan.candidates import GridRequest

    warmups = tuple(args.warmups) if args.warmups is not None else (0, max(1, horizon // 10) if not accuracy else 0)
    switches = tuple(args.switches) if args.switches is not None else \
        ((max(1, horizon // 4), max(1, horizon // 2)) if not accuracy else ())
    return GridRequest(devices=args.devices, schedules=args.schedules, mitigations=tuple(args.mitigations),
                       optimizers=tuple(args.optimizers), microbatches=args.microbatches,
                       warmups=tuple(sorted(set(warmups))), switches=tuple(sorted(set(switches))))


def _plan_request(args: argparse.Namespace, base: TrainConfig, out: Path, horizon: int,
                  max_h: int) -> PlanRequest:
    """The plan's request: candidates, target, and the target hardware's profile and link."""
    from stalesim.cli.cluster_args import attach_cluster, cluster_link_defaults, cluster_options
    from stalesim.cli.simulate_cmd import read_cli_calibration, resolve_cli_hardware
    from stalesim.plan.convergence import Target
    from stalesim.plan.workflow import PlanRequest
    from stalesim.validate.steps import profile_sizes

    accuracy = args.target_accuracy is not None
    greq = _grid_request(args, horizon, accuracy)
    micro = args.microbatches or 2 * args.devices
    cluster_link_defaults(args)
    opts = cluster_options(args)
    cal = read_cli_calibration(args)  # before the profile is measured: a flag it cannot apply to fails first
    prof = _profile(args, out, profile_sizes(args.batch_size, micro, args.devices))
    prof, hw = resolve_cli_hardware(args, prof, args.target, args.link)
    hw = attach_cluster(args, hw)
    cap = args.device_memory * 2**30 if args.device_memory is not None else getattr(hw, "memory_bytes", None)
    target = (Target("accuracy", args.target_accuracy) if accuracy
              else Target("loss", args.target_loss, smooth=args.smooth))
    name = args.target or getattr(prof, "device", "profile device")
    if args.link:
        name += f" + {args.link}"
    return PlanRequest(base=base, grid=greq, target=target, seeds=list(dict.fromkeys(args.seeds)),
                       horizon=horizon, max_horizon=max_h, profile=prof, hardware=hw, hardware_name=name,
                       calibration=cal,
                       out=out, time_error=args.time_error, capacity_bytes=cap, jobs=args.jobs,
                       batched=args.batched, progress=False if args.quiet else None,
                       sim_options={**opts, "method": args.method})


def _print_plan(args: argparse.Namespace, plan: Plan, out: Path) -> None:
    """plan.json (--json), or the ranked table, what was skipped and the files written."""
    from stalesim.cost.calibration import defaults_line, read_calibration
    from stalesim.plan.report import table

    if args.json:
        import json

        print_json(json.loads((out / "plan.json").read_text(encoding="utf-8")))
        return
    print(table(plan.rows, plan.header))
    print(defaults_line(read_calibration(args.calibration) if args.calibration else None))
    if plan.skipped:
        print(f"skipped {len(plan.skipped)}: " + "; ".join(f"{a} ({b})" for a, b in plan.skipped[:6])
              + (" ..." if len(plan.skipped) > 6 else ""))
    print(f"wrote {', '.join(str(p) for p in plan.paths)}")


def _run_workload(args: argparse.Namespace) -> int:
    """``--workload``: every schedule x mitigation at the given degrees, ranked by predicted
    iteration time among those that fit (stalesim.plan.llm); nothing is emulated."""
    import sys

    from stalesim.cli.flagcheck import check_modes, check_whole_nodes, refuse_dead_values
    from stalesim.cli.llm_args import FIRST_LAST, llm_hardware, open_choices, workload_spec
    from stalesim.plan.llm import LLM_MITIGATIONS, llm_rows, llm_table
    from stalesim.sim.parallel import ParallelPlan, describe, supported_schedules

    # the emulation's flags: a 70B model's convergence is not emulated here (docs/plan.md)
    check_modes("plan", args)
    spec = workload_spec(args)
    hw = llm_hardware(args)
    tp, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    if args.devices % (tp * cp * pp):
        raise StalesimError(f"devices: {args.devices} GPUs are not a multiple of tp x cp x pp = {tp * cp * pp}")
    dp = args.devices // (tp * cp * pp)
    b = args.micro_batch or 1
    batch = args.batch_size or dp * b * (args.microbatches or 2 * pp)
    base = ParallelPlan(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=b, global_batch=batch, sp=args.sp,
                        recompute=args.recompute or "none", recompute_every=args.recompute_every or 1,
                        zero=args.zero or 0,
                        optimizer=args.optimizer or "adam", precision=args.precision or "mixed",
                        framework=args.framework or "megatron", tp_overlap=args.tp_overlap,
                        dp_overlap=args.dp_overlap, zero_prefetch=args.zero_prefetch, p2p_overlap=args.p2p_overlap,
                        stage_layers=args.stage_layers if isinstance(args.stage_layers, tuple) else None)
    check_whole_nodes(args.devices, hw)  # the candidates' own checks run first in llm_rows, before any work
    schedules = args.schedules or supported_schedules()
    mits = list(LLM_MITIGATIONS) if "all" in args.mitigations else args.mitigations
    rows = llm_rows(spec, hw, base, schedules, mits, iterations=args.iterations, open_choices=open_choices(args),
                    first_last=args.stage_layers == FIRST_LAST)
    # a plan no candidate can apply is the user's input (the most common reason names the flag)
    refuse_dead_values("plan", {}, [({}, None if r["error"] is None else StalesimError(r["error"])) for r in rows])
    header = (f"plan: {spec.name} on {args.devices} GPUs ({describe(hw)}); tp {tp} x cp {cp} x pp {pp} x dp {dp}, "
              f"{batch} sequences of {spec.seq} per iteration, micro-batch {b}, recompute {base.recompute}, "
              f"zero {base.zero}, {base.optimizer} ({base.precision}); ranked by predicted iteration time "
              f"among the candidates that fit {hw.device.memory_bytes / 1e9:.0f} GB per GPU")
    doc = {"command": "stalesim " + " ".join(sys.argv[1:]), "workload": spec.name, "header": header,
           "plan": base.to_dict(), "iterations": args.iterations, "rows": rows}
    written = []
    if args.out:
        from stalesim.atomic import check_writable_dir, write_csv_atomic, write_json_atomic

        out = check_writable_dir(Path(args.out))
        written = [write_json_atomic(out / "plan.json", doc),
                   write_csv_atomic(out / "plan.csv", rows, header=list(dict.fromkeys(k for r in rows for k in r)))]
    if args.json:
        print_json(doc)
    else:
        print(llm_table(rows, header, iterations=args.iterations))
        if written:
            print(f"wrote {', '.join(str(p) for p in written)}")
    return 0
