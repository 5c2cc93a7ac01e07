"""``stalesim demo``: the main job, end to end, in a few minutes.

1. the schedule IR: every schedule's derived staleness (table);
2. profile a model on this machine (the ranks' thread count; alone and with the
   other rank busy);
3. calibrate this machine's link (gloo, or NCCL on a CUDA box);
4. validate on 2 local ranks (short): predicted vs measured, emulated vs executed;
   it measures this machine's cost terms (per-action overhead, per-message costs, the
   runtime's gaps) and stores them as a machine calibration;
5. predict speed-up, utilization and memory for 2/4/8 devices of this kind, with that
   calibration (the cost model ``validate``, ``simulate --calibration``, ``sweep`` and
   ``plan`` predict these ranks with), and of a catalog GPU over two link kinds (the
   roofline of the same profile: no term measured here carries over to a GPU);
6. with MNIST (``--data-dir`` or ``$STALESIM_DATA``): a short emulated staleness
   study, sequential vs stale weights;
7. one summary table; figures in ``--out`` (default ``runs/demo``).

On a machine with two or more GPUs the ranks are ``cuda:0,1``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import add_extrapolate_arg, fmt_or_na, int_type, positive_int
from stalesim.cli.demo_report import Section
from stalesim.limits import MAX_REPEATS
from stalesim.schedule.actions import UNSPLIT_COMPUTE_NAMES

if TYPE_CHECKING:
    from stalesim.devices import Devices
    from stalesim.sim.model import SimHardware
    from stalesim.validate.config import ValidateConfig
    from stalesim.validate.costmodel import CostModel
    from stalesim.workloads.profile import Profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: schedules, prediction, validation, staleness study")
    p.add_argument("--stages", type=int_type(1, MAX_TABLE_STAGES), default=4,
                   help=f"pipeline depth for the schedule table (1..{MAX_TABLE_STAGES})")
    p.add_argument("--out", default="runs/demo", help="folder for figures, reports and summary")
    p.add_argument("--model", default="resnet20", help="model to profile, predict and validate")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="validation mini-batch (prediction: 4x; default 32, --quick 16)")
    p.add_argument("--iterations", type=positive_int, default=None,
                   help="iterations per validated schedule (default 12, --quick 8)")
    p.add_argument("--repeats", type=int_type(1, MAX_REPEATS), default=None,
                   help="measured runs per validated schedule (interleaved; the noise floor; default 3, "
                        "--quick 2)")
    p.add_argument("--schedules", default=None,
                   help="schedules to validate on 2 ranks, or all (default sequential,1f1b,pipedream,stale,dp,"
                        "pipe-sgd,zb-v; --quick 1f1b,dp)")
    p.add_argument("--devices", default=None, help="validation ranks (default cuda:0,1 with 2+ GPUs, else cpu:2)")
    p.add_argument("--data-dir", default=None, help="MNIST root for the staleness study ($STALESIM_DATA)")
    p.add_argument("--study-iterations", type=positive_int, default=None,
                   help="iterations of the staleness study (default 300, --quick 60)")
    p.add_argument("--target", default="h100-sxm", metavar="KIND",
                   help="catalog device for the what-if prediction (as simulate --target)")
    p.add_argument("--quick", action="store_true",
                   help="tiny everything (smoke test); flags given explicitly are still honoured")
    add_extrapolate_arg(p)
    p.set_defaults(func=run)


# the schedule table builds every schedule over 4S+4 batches of S micro-batches: S = 16
# is about 50,000 actions per schedule (a second); deeper tables only take longer to print
MAX_TABLE_STAGES = 16


def _validate_config(args: argparse.Namespace, out: str, devices: str, B: int, iters: int, scheds: str,
                     hardware: str | None = None, profile: str | None = None,
                     contended_profile: str | None = None) -> ValidateConfig:
    """The validation step's config (also checked up front by :func:`check_args`); the files
    are the profiles and link measured by the earlier steps (None: validate measures them)."""
    from stalesim.validate.config import ValidateConfig

    return ValidateConfig(model=args.model, devices=devices, schedules=[scheds], iterations=iters,
                          batch_size=B, microbatches=4, threads=1, out=os.path.join(out, "validate"),
                          emulate_iterations=3, repeats=args.repeats,
                          command=f"stalesim validate --model {args.model} --devices {devices} "
                                  f"--schedules {scheds} --iterations {iters} --batch-size {B} "
                                  f"--repeats {args.repeats} --out {os.path.join(out, 'validate')}",
                          hardware=hardware, profile=profile, contended_profile=contended_profile)


def _defaults(args: argparse.Namespace) -> None:
    """Fill the flags the user left out; --quick shrinks only those (never a given one)."""
    quick = args.quick
    for name, full, small in (("batch_size", 32, 16), ("iterations", 12, 8), ("study_iterations", 300, 60),
                              ("repeats", 3, 2),
                              ("schedules", "sequential,1f1b,pipedream,stale,dp,pipe-sgd,zb-v", "1f1b,dp")):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)


def check_args(args: argparse.Namespace, devices: str) -> None:
    """Every flag checked before step 1: a typo must not cost minutes of profiling."""
    from stalesim.errors import StalesimError
    from stalesim.runtime.datapaths import check_data_dir
    from stalesim.validate.config import check_config, check_out_dir
    from stalesim.workloads.hardware import get_device

    try:
        get_device(args.target)
    except StalesimError as exc:
        raise StalesimError(f"--target: {exc}") from None
    check_data_dir(args.data_dir, "--data-dir")
    check_out_dir(args.out)
    check_config(_validate_config(args, args.out, devices, args.batch_size, args.iterations,
                                  args.schedules))


def schedule_table(stages: int) -> str:
    from stalesim.schedule import build_schedule, get_spec, schedule_names

    rows = [("schedule", "policy", "staleness per stage", "v_B != v_F on stages", "what")]
    for name in schedule_names():
        spec = get_spec(name)  # virtual stages: `stages` devices of V chunks each
        sched = build_schedule(spec.config(stages=stages * spec.stages_per_device,
                                           batches=4 * stages + 4, microbatches=stages, workers=2))
        v = sched.table
        rows.append((name, str(sched.policy), str(v.staleness()), str(v.inconsistent_stages() or "-"),
                     get_spec(name).summary))
    return _table(rows)


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


class _Steps:
    """Progress: one line per step with the elapsed time."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.t0 = time.perf_counter()
        self.k = 0
        self.log: list[str] = []  # every line printed, for the report

    def __call__(self, msg: str) -> None:
        self.k += 1
        self._print(f"[{self.k}/{self.total}] ({time.perf_counter() - self.t0:5.1f} s) {msg}", "\n")

    def note(self, msg: str) -> None:
        self._print(f"      ({time.perf_counter() - self.t0:5.1f} s) {msg}")

    def _print(self, line: str, before: str = "") -> None:
        self.log.append(line)
        print(before + line, flush=True)


def run(args: argparse.Namespace) -> int:
    import torch

    devices = args.devices or ("cuda:0,1" if torch.cuda.is_available() and torch.cuda.device_count() >= 2
                               else "cpu:2")
    _defaults(args)
    check_args(args, devices)
    return run_demo(args, devices)


@dataclass(frozen=True)
class _Demo:
    """What every step reads: the checked flags, the ranks, the output folder and the progress."""

    args: argparse.Namespace
    devices: str  # as given (or defaulted)
    devs: Devices
    out: Path
    step: _Steps
    sections: list[Section] = field(default_factory=list)  # the report's, one per step's table
    seconds: dict[str, float] = field(default_factory=dict)  # measured step times the estimates use

    @property
    def cuda(self) -> bool:
        return self.devices.startswith("cuda")

    @property
    def predict_batch(self) -> int:
        """The prediction's mini-batch: four validation mini-batches."""
        return 4 * int(self.args.batch_size)


def run_demo(args: argparse.Namespace, devices: str) -> int:
    """The seven steps (minutes of measuring); every flag was checked by :func:`check_args`."""
    step = _Steps(7)
    step(f"schedule IR: every schedule at S={args.stages}, staleness derived from the action order")
    ir_table = schedule_table(args.stages)
    print(ir_table)

    # In-process work (profiling, emulation) uses one thread, as each rank does: with
    # more, OpenMP threads spin against each other and everything else on a small shared box.
    from stalesim.cli.common import DEFAULT_THREADS, apply_threads
    from stalesim.devices import parse_devices
    from stalesim.runtime.datapaths import pin_data_env
    from stalesim.validate.config import check_out_dir

    apply_threads(DEFAULT_THREADS)
    out = check_out_dir(args.out)
    data_dir = args.data_dir or pin_data_env()
    load0 = os.getloadavg()
    d = _Demo(args, devices, parse_devices(devices), out, step)
    d.sections.append(Section(f"schedules at S={args.stages}: staleness derived from the action order", ir_table))
    cm = _profile_step(d)
    hw = _calibrate_step(d)
    # validation first: its measured machine terms are what the predictions for these
    # ranks use, so both steps predict the same ranks with one cost model
    vsum = _validate_step(d, cm)
    grid = _predict_step(d, cm, hw)
    study = _study_step(d, data_dir)
    _summary_step(d, load0, grid, vsum, study)
    return 0


def _profile_step(d: _Demo) -> CostModel:
    """Step 2: profile the model (alone, and on CPU with the other rank busy) at the batch
    sizes validation and prediction use. The machine's runtime terms are validation's to
    measure (step 4), once."""
    from stalesim.validate.costmodel import CostModel
    from stalesim.validate.steps import profile_sizes

    sizes = profile_sizes(d.args.batch_size, 4, d.devs.count)
    co_batch = sizes[-1]
    # the prediction's mini-batch too: its one-device baseline is then measured, not
    # extrapolated (its micro-batches and worker slices 4B/2n, 4B/n lie inside the range)
    if d.predict_batch not in sizes:
        sizes.append(d.predict_batch)
    prof, contended = _measure_profiles(d, sizes, co_batch)
    if contended is not None:
        contended.to_json(d.out / "profile_contended.json")
    prof.to_json(d.out / "profile.json")
    prof = prof.with_extrapolation(d.args.extrapolate)
    contended = None if contended is None else contended.with_extrapolation(d.args.extrapolate)
    cm = CostModel(prof, contended)
    ratio = cm.contention_ratio()
    whole = prof.whole_model_s
    if whole is None:  # profile_model and paired_profiles always time the whole model too
        raise AssertionError("the measured profile has no whole-model time")
    d.step.note(f"one training step at batch {d.args.batch_size}: {whole * 1e3:.1f} ms alone"
                + (f", x{ratio:.2f} with the other rank busy" if ratio else ""))
    return cm


def _measure_profiles(d: _Demo, sizes: list[int], co_batch: int) -> tuple[Profile, Profile | None]:
    """The profile alone and, on CPU ranks, its twin with the other rank busy (None on CUDA)."""
    # steps that run longer than a few seconds with no count to show: a heartbeat on stderr
    from stalesim.progress import heartbeat
    from stalesim.validate.corunners import paired_profiles
    from stalesim.workloads.profiler import profile_model

    model, dev0, quick = d.args.model, d.devs.device_for(0), d.args.quick
    repeats = 2 if quick else 3
    if d.cuda:
        d.step(f"profiling {model} on {dev0} at batch {sizes} (as each rank runs it)")
        with heartbeat("step 2: profiling"):
            prof = profile_model(model, sizes, device=dev0, threads=1, repeats=repeats, warmup=1 if quick else 2)
        return prof, None
    d.step(f"profiling {model} on {dev0} at batch {sizes} (1 thread, as each rank runs it), "
           "alone and with the other rank busy (memory-bandwidth / cache contention), alternating")
    with heartbeat("step 2: profiling"):
        return paired_profiles(model, sizes, co_runners=d.devs.count - 1, threads=1, device=dev0,
                               repeats=2 * repeats, co_batch=co_batch)


def _calibrate_step(d: _Demo) -> SimHardware:
    """Step 3: calibrate the link between two local ranks (written as hardware.json)."""
    from stalesim.cli.common import write_json_atomic
    from stalesim.progress import heartbeat
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.calibrate import calibrate
    from stalesim.workloads.hardware import hardware_from_dict

    quick = d.args.quick
    backend = "nccl" if d.cuda else "gloo"
    d.step(f"calibrating the {backend} link between 2 local ranks")
    t0 = time.perf_counter()
    with heartbeat("step 3: calibrating"):
        hw_dict = calibrate(backend, 2, sizes=[4 * 4**k for k in range(8 if quick else 11)],
                            repeats=2 if quick else 3, devices=d.devs.first(2) if d.devs.count >= 2 else None)
    d.seconds["calibrate"] = time.perf_counter() - t0
    write_json_atomic(d.out / "hardware.json", hw_dict)
    hw = SimHardware.from_hardware(hardware_from_dict(hw_dict))
    d.step.note(f"latency {hw.latency_ns / 1e3:.1f} us, bandwidth "
                f"{hw.bandwidth_Bps / 1e9:.2f} GB/s, CPU occupancy of a transfer {hw.cpu_comm_occupancy:.2f}")
    return hw


def _predict_step(d: _Demo, cm: CostModel, hw: SimHardware) -> list[dict[str, Any]]:
    """Step 5: predict 2/4/8 devices of this kind, with the machine calibration step 4 stored,
    and of the catalog ``--target`` (the roofline of the same profile)."""
    from stalesim.cli.common import write_json_atomic
    from stalesim.figures.speedup_fig import prediction_figure
    from stalesim.progress import heartbeat
    from stalesim.validate.demo import ideal_line_statement, predict_grid

    cal_path = d.out / "validate" / "calibration.json"
    local_cm, local_hw = calibrated_model(cm, hw, cal_path)
    d.step(f"predicting 2/4/8 devices at mini-batch {d.predict_batch}: this {'GPU' if d.cuda else 'CPU'} "
           f"with the machine terms step 4 measured ({cal_path.relative_to(d.out)}), and {d.args.target} "
           "over pcie4-x16 / nvlink4 (roofline from the same profile)")
    d.step.note("per-action runtime overhead F/B/U/LOSS "
                + "/".join(f"{local_cm.overhead_s.get(k, 0.0) * 1e6:.0f}" for k in UNSPLIT_COMPUTE_NAMES)
                + " us; per-message costs " + ("measured" if local_cm.comm else "not measured")
                + f"; link latency {local_hw.latency_ns / 1e3:.1f} us beyond posting a message")
    with heartbeat("step 5: predicting"):
        grid = predict_grid(local_cm, local_hw, batch_size=d.predict_batch, gpu=d.args.target,
                            cpu_label="this GPU" if d.cuda else "this CPU")
    prediction_figure(grid, d.out / "predict_speedup.png")
    write_json_atomic(d.out / "predictions.json", grid)
    text = _grid_text(grid, d.predict_batch) + "\n" + ideal_line_statement(grid)
    print(text)
    d.sections.append(Section("prediction: speed-up over one device", text, (d.out / "predict_speedup.png",)))
    return grid


def calibrated_model(cm: CostModel, hw: SimHardware, calibration: Path) -> tuple[CostModel, SimHardware]:
    """The cost model and link that predict the validated ranks: ``cm``'s profiles (alone and
    contended) with the machine terms of ``calibration`` (the file ``validate`` writes, as
    ``simulate --calibration`` reads it), on the link its per-message costs leave. Without
    the file (a validation without a calibration), ``cm`` and ``hw`` as they are."""
    from dataclasses import replace

    from stalesim.cost.calibration import read_calibration
    from stalesim.cost.terms import link_from_comm
    from stalesim.validate.costmodel import CostModel

    if not calibration.is_file():
        return cm, hw
    cal = read_calibration(calibration)
    return (replace(CostModel.from_calibration(cm.profile, cal), contended=cm.contended),
            link_from_comm(hw, cal.comm))


def _validate_step(d: _Demo, cm: CostModel) -> dict[str, Any]:
    """Step 4: validate on the local ranks, reusing the profiles and link measured above; it
    stores the machine terms it measures (``validate/calibration.json``) for step 5."""
    from stalesim.cli.demo_eta import RoundClock
    from stalesim.cli.validate_cmd import summary_table
    from stalesim.validate.workflow import validate

    args, out = d.args, d.out
    d.step(f"validating on {d.devices}: {args.schedules} ({args.iterations} iterations each, {args.repeats} "
           "interleaved repeats): predicted vs measured, with each schedule's noise floor")
    vcfg = _validate_config(args, str(out), d.devices, args.batch_size, args.iterations, args.schedules,
                            hardware=str(out / "hardware.json"), profile=str(out / "profile.json"),
                            contended_profile=str(out / "profile_contended.json") if cm.contended else None)
    d.step.note(f"{_validate_eta(d, cm)} on this machine (the runs' steps at "
                "step 2's step time, a rank start per round at step 3's time; the stage timing between rounds "
                "comes on top: refined after the first round)")
    vsum = validate(vcfg, progress=RoundClock(lambda m: d.step.note(m.split("] ", 1)[-1])))
    text = summary_table(vsum)
    print(text)
    d.sections.append(Section(f"validation on {d.devices}: predicted vs measured", text,
                              tuple(sorted((out / "validate" / "figures").glob("*.png")))))
    return vsum


def _validate_eta(d: _Demo, cm: CostModel) -> str:
    """The validation step's estimated time, a lower bound (:mod:`stalesim.cli.demo_eta`)."""
    from stalesim.cli.demo_eta import fmt_eta, validate_estimate_s

    step_s = (cm.profile.whole_model_s or 0.0) * (cm.contention_ratio() or 1.0)
    cfg = _validate_config(d.args, str(d.out), d.devices, d.args.batch_size, d.args.iterations, d.args.schedules)
    n = len(cfg.schedules[0].split(","))  # "all" counts as one: still a lower bound
    return fmt_eta(validate_estimate_s(step_s=step_s, start_s=d.seconds.get("calibrate", 0.0), schedules=n,
                                       iterations=cfg.iterations, repeats=cfg.repeats or 1,
                                       emulate_iterations=cfg.emulate_iterations), lead="at least")


def _study_step(d: _Demo, data_dir: str | None) -> list[dict[str, Any]] | None:
    """Step 6: the emulated staleness study on MNIST (None: no MNIST here)."""
    if not (data_dir and os.path.isdir(data_dir)):  # an explicit --data-dir was checked up front
        d.step("staleness study skipped: no MNIST (give --data-dir or set STALESIM_DATA)")
        return None
    from stalesim.cli.common import write_json_atomic
    from stalesim.progress import heartbeat
    from stalesim.validate.demo import staleness_figure, staleness_study

    n = d.args.study_iterations
    d.step(f"staleness study on MNIST ({data_dir}): LeNet-5 sequential vs stale, {n} iterations, emulated")
    with heartbeat("step 6: staleness study"):
        study = staleness_study(data_dir, iterations=n, progress=d.step.note)
    staleness_figure(study, d.out / "staleness.png")
    rows = [(str(r["schedule"]), str(r["staleness_ir"]), str(r["iterations"]),
             fmt_or_na(r.get("final_test_accuracy"), ".4f")) for r in study]
    d.sections.append(Section("staleness study (LeNet-5 / MNIST, emulated)",
                              _table([("schedule", "staleness", "iterations", "final test accuracy"), *rows]),
                              (d.out / "staleness.png",)))
    write_json_atomic(d.out / "staleness.json", [{k: v for k, v in r.items()} for r in study])
    return study


# the validation summary's fields that summary.json keeps
_VALIDATE_KEYS = ("median_abs_time_error", "max_abs_time_error", "median_noise_floor", "max_noise_floor",
                  "max_abs_memory_error", "max_abs_utilization_error_points", "max_abs_speedup_error",
                  "max_loss_rel_diff")


def _summary_step(d: _Demo, load0: tuple[float, float, float], grid: list[dict[str, Any]],
                  vsum: dict[str, Any], study: list[dict[str, Any]] | None) -> None:
    """Step 7: the summary table, summary.json and where the figures are."""
    from stalesim.cli.common import write_json_atomic

    out = d.out
    elapsed = time.perf_counter() - d.step.t0
    d.step(f"summary ({elapsed:.0f} s; load average before {load0[0]:.2f})")
    text = _summary(grid, vsum, study, predict_batch=d.predict_batch, validate_batch=int(d.args.batch_size))
    print(text)
    summary = {"elapsed_s": elapsed, "load_average_before": list(load0),
               "load_average_after": list(os.getloadavg()), "devices": d.devices, "model": d.args.model,
               "validate": {k: vsum.get(k) for k in _VALIDATE_KEYS},
               "validate_rows": vsum["rows"], "predictions": grid,
               "staleness": None if study is None else [{k: v for k, v in r.items() if k != "losses"}
                                                        for r in study]}
    write_json_atomic(out / "summary.json", summary)
    from stalesim.cli.demo_report import write_report

    md, page = write_report(out, f"stalesim demo: {d.args.model} on {d.devices}",
                            [Section("summary", text), *d.sections, Section("progress", "\n".join(d.step.log))])
    print(f"\nreport: {page} (figures embedded, opens offline) and {md}; figures: {out}/predict_speedup.png, "
          f"{out}/validate/figures/, " + (f"{out}/staleness.png; " if study else "")
          + f"validation report: {out}/validate/report.md; summary: {out}/summary.json")


def _grid_text(grid: list[dict[str, Any]], batch_size: int) -> str:
    """The prediction table with its cost sources, marks and warnings, as printed."""
    from stalesim.units import fmt_bytes

    groups: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    names: list[str] = []
    for r in grid:
        groups.setdefault((r["hardware"], r["link"], r["devices"]), {})[r["schedule"]] = r
        if r["schedule"] not in names:
            names.append(r["schedule"])
    rows = [("hardware / link", "N", *names, "peak mem/dev (max)")]
    for (hwl, link, n), by in groups.items():
        cells = []
        for s in names:
            cell = by.get(s)
            cells.append("-" if cell is None else
                         f"{cell['speedup']:.2f}x{_mark(cell)} u{cell['utilization_mean']:.2f}")
        mem = max((r["peak_memory_bytes_max"] or 0) for r in by.values())
        rows.append((f"{hwl} / {link}", str(n), *cells, fmt_bytes(mem)))
    lines = [f"predicted speed-up over one device (and mean utilization), mini-batch {batch_size}:", _table(rows)]
    sources: dict[tuple[str, str], dict[str, str]] = {}
    for r in grid:
        sources.setdefault((r["hardware"], r["link"]), {}).update(r.get("cost_batches", {}))
    for (hwl, link), by_b in sources.items():
        lines.append(f"  costs for {hwl} / {link}: " + ", ".join(f"batch {b} {src}" for b, src in by_b.items()))
    lines.append("  marks: * extrapolated outside the profiled batch sizes, ! above the ideal line (cause below)")
    seen: set[str] = set()
    for r in grid:
        for w in r.get("warnings", []):
            if w not in seen:
                seen.add(w)
                lines.append(f"  WARNING {r['schedule']} on {r['devices']} x {r['hardware']} / {r['link']}: {w}")
    return "\n".join(lines)


def _mark(r: dict[str, Any]) -> str:
    return ("*" if r.get("cost_source") == "extrapolated" else "") + ("!" if r.get("above_ideal") else "")


def _summary(grid: list[dict[str, Any]], vsum: dict[str, Any], study: list[dict[str, Any]] | None, *,
             predict_batch: int, validate_batch: int) -> str:
    """The summary table: each setup's predicted best (at the prediction's mini-batch), then
    the validated schedules at theirs, predicted against measured on the same ranks."""
    from stalesim.validate.report import busy_line

    lines = []
    best: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in grid:
        k = (r["hardware"], r["link"], r["devices"])
        if r["speedup"] and (k not in best or r["speedup"] > best[k]["speedup"]):
            best[k] = r
    rows = [("what", "where", "result")]
    for (hwl, link, n), r in best.items():
        rows.append(("predicted best", f"{n} x {hwl} / {link}, batch {predict_batch}",
                     (f"{r['schedule']}: {r['speedup']:.2f}x{_mark(r)}, utilization "
                      f"{r['utilization_mean']:.2f}, staleness {r['staleness_max']}, "
                      f"costs {r.get('cost_source', 'given')}")))
    if (fastest := validated_fastest(vsum["rows"])) is not None:
        rows.append(("validated best", f"{vsum['devices']}, batch {validate_batch}", fastest))
    for r in vsum["rows"]:
        rows.append(("validated", f"{r['schedule']} on {vsum['devices']}", _validated(r)))
    wn, wt = vsum.get("schedules_within_noise"), vsum.get("schedules_with_noise_floor")
    rows.append(("validation", "all schedules",
                 (f"median |time error| {_pct(vsum.get('median_abs_time_error'))}, max "
                  f"{_pct(vsum.get('max_abs_time_error'))}; noise floor median "
                  f"{_pct(vsum.get('median_noise_floor'))} ({wn if wn is not None else 'n/a'} of "
                  f"{wt if wt is not None else 'n/a'} within noise); "
                  f"load average {vsum['load_average']['before']}"
                  + (f"; {busy}" if (busy := busy_line(vsum)) else ""))))
    for r in study or []:
        acc = r.get("final_test_accuracy")
        rows.append(("staleness study", f"LeNet-5/MNIST {r['schedule']}",
                     (f"staleness {r['staleness_ir']}, loss {r['final_loss_mean20']:.3f}, "
                      f"test accuracy {'n/a' if acc is None else f'{acc:.4f}'} after {r['iterations']} it.")))
    lines.append(_table(rows))
    from stalesim.validate.demo import ideal_line_statement

    lines.append(ideal_line_statement(grid))
    return "\n".join(lines)


def validated_fastest(rows: Sequence[dict[str, Any]]) -> str | None:
    """The fastest validated schedule as predicted and as measured, on the same ranks at the
    same mini-batch (None: no row has both speed-ups)."""
    both = [r for r in rows if r.get("predicted_speedup") and r.get("measured_speedup")]
    if not both:
        return None
    p = max(both, key=lambda r: r["predicted_speedup"])
    m = max(both, key=lambda r: r["measured_speedup"])
    same = "the same schedule" if p["schedule"] == m["schedule"] else "a different schedule"
    return (f"predicted {p['schedule']} ({p['predicted_speedup']:.2f}x), measured {m['schedule']} "
            f"({m['measured_speedup']:.2f}x): {same}")


def _validated(r: dict[str, Any]) -> str:
    """One validated schedule: predicted vs measured time, speed-up, memory and loss."""
    na = fmt_or_na
    pit, mit = r["predicted_iteration_time_s"], r["measured_iteration_time_s"]
    within = " within noise" if r.get("time_error_within_noise") else ""
    return (f"predicted {na(pit and pit * 1e3, '.1f')} ms vs measured {na(mit and mit * 1e3, '.1f')} ms "
            f"({na(r['time_error'], '+.1%')}, noise {na(r.get('noise_floor'), '.1%')}{within}); "
            f"speed-up {na(r['predicted_speedup'], '.2f')}/{na(r['measured_speedup'], '.2f')}; "
            f"memory {na(r.get('memory_error'), '+.1%')}; loss diff {na(r['max_loss_rel_diff'], '.0e')}")


def _pct(x: float | None) -> str:
    return fmt_or_na(x, ".1%")
