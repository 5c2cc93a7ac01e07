"""``validate``: profile -> calibrate -> baseline -> run -> simulate -> emulate -> compare -> report.

Every consumer gets the same numbers (model, batch size, micro-batches, the
partition found once from the profile, iterations, seed) and the same schedule
(``TrainConfig.schedule_config``), so the report's differences are modelling
errors. The steps are in :mod:`stalesim.validate.steps`; this module runs them in
order, times each, and writes ``summary.json``, ``report.md``, figures and traces.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from stalesim.validate.config import ValidateConfig, check_config
from stalesim.validate.steps import (
    Progress,
    Validation,
    baseline_step,
    calibrate_step,
    clean,
    compare_step,
    emulate_step,
    profile_step,
    run_step,
    simulate_step,
    train_config,
)
from stalesim.validate.tbscalars import ValidationScalars

# the runs come before the predictions because the stage times the predictions use are taken
# between the runs' rounds (steps.run_step); nothing a run measures enters a prediction
STEP_ORDER = (("profile", profile_step), ("calibrate", calibrate_step), ("baseline", baseline_step),
              ("run", run_step), ("simulate", simulate_step), ("emulate", emulate_step),
              ("compare", compare_step))


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def validate(cfg: ValidateConfig, progress: Progress | None = None,
             tensorboard: Path | None = None) -> dict[str, Any]:
    """Run the whole validation; returns the summary (also written to ``cfg.out``).
    ``tensorboard``: a folder each schedule's round times and errors are written under
    (:mod:`stalesim.validate.tbscalars`), through one writer per schedule that lives as long
    as the validation and is closed however it ends."""
    scalars = ValidationScalars(tensorboard) if tensorboard is not None else None
    try:
        return _validate(cfg, progress, scalars)
    finally:
        if scalars is not None:
            scalars.close()


def _validate(cfg: ValidateConfig, progress: Progress | None, scalars: ValidationScalars | None) -> dict[str, Any]:
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    devs, scheds = check_config(cfg)
    if cfg.dataset != "synthetic":  # fail now (one line), not inside a rank later
        from stalesim.runtime.data import load_dataset

        load_dataset(train_config(cfg, "sequential", 1, [], cfg.iterations))
    v = Validation(cfg=cfg, devs=devs, schedules=scheds, out=Path(cfg.out), say=say, tensorboard=scalars)
    from stalesim.validate.checkpoint import clear, load

    if cfg.resume:
        v.resumed = load(v.out, cfg)
    else:
        clear(v.out)
    timings: dict[str, float] = {}
    from stalesim.validate.busy import cpu_sample

    load_before = _loadavg()
    cpu_before = cpu_sample()
    t_all = time.perf_counter()
    for name, step in STEP_ORDER:
        t0 = time.perf_counter()
        step(v)
        timings[f"{name}_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = _summary(v, timings, load_before, cpu_before)
    if scalars is not None:
        scalars.final(v.rows, cfg.repeats)
    from stalesim.atomic import write_json_atomic
    from stalesim.validate.report import write_outputs, write_report

    say(f"[validate] writing report, summary and figures to {v.out}")
    files = write_outputs(v.out, summary, sims=v.sims, measured=v.measured, mtimes=v.mtimes,
                          emulated=v.emulated)
    if v.attribution:
        from stalesim.atomic import write_csv_atomic
        from stalesim.validate.breakdown import COLUMNS

        write_csv_atomic(v.out / "attribution.csv", v.attribution, header=COLUMNS)
        files["attribution"] = "attribution.csv"
    timings["report_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_all
    summary["files"] = files
    write_json_atomic(v.out / "summary.json", clean(summary))
    write_report(v.out, clean(summary))
    return clean(summary)


def _summary(v: Validation, timings: dict[str, float], load_before: list[float] | None,
             cpu_before: Any = None) -> dict[str, Any]:
    from stalesim.validate.breakdown import goal_terms, per_device
    from stalesim.validate.busy import background_load, busy_warning, cores_used, cpu_sample, other_work_cores
    from stalesim.validate.compare import aggregate, goals_met, noise_only_error

    agg = aggregate(v.rows)
    met = goals_met(agg)
    load_after = _loadavg()
    used = cores_used(v.n, v.cfg.threads, v.devs.kind)
    other = other_work_cores(cpu_before, cpu_sample())
    measure = "CPU use (cores busy on average during the run)"
    if other is None:  # no /proc/stat: the load average, which also holds the command's own earlier work
        other, measure = background_load(load_before, load_after, used), "1-minute load"
    busy = {"warning": busy_warning(other, os.cpu_count(), used, agg["median_noise_floor"],
                                    agg["median_abs_time_error"], measure=measure),
            "other_load": other, "other_load_measure": measure, "cores": os.cpu_count(), "cores_used": used}
    return {
        "command": v.cfg.command or "stalesim validate",
        "config": v.cfg.to_dict(),
        "devices": str(v.devs),
        "schedules": v.schedules,
        "ppv": v.ppv,
        "rows": v.rows,
        # measured - predicted ms per iteration, per schedule and device, by term group
        # (every device, stage and term with both sides and the replay: attribution.csv)
        "attribution": per_device(v.attribution),
        **agg,
        "goals_met": met,
        # per missed time / replay goal, the term that carries most of it and its measured size
        "goal_terms": goal_terms(v.attribution, v.rows, met),
        # the |time error| a perfect model would show at this run's noise (both sides)
        "noise_only_error": noise_only_error(v.rows),
        "repeats": v.cfg.repeats,
        "protocol": (f"each schedule measured {v.cfg.repeats} time(s), interleaved round-robin with the "
                     "1-rank baseline (rotated order per round); measured = median, noise floor = "
                     "IQR / median; error within noise when |error| <= noise floor"),
        "baseline": {"predicted_iteration_time_s": v.base_sim.iteration_time_s,
                     "measured_iteration_time_s": v.base_timing["iteration_time_s"],
                     "measured_iteration_times_s": v.base_timing.get("repeats_s"),
                     "noise_floor": v.base_timing.get("noise_floor"),
                     "what": "sequential, S=1, on one rank of the same device kind and thread count"},
        "cost_model": v.cm.to_dict(),
        "profile": v.prof.to_dict(),
        "contended_profile_meta": None if v.contended is None else v.contended.meta,
        "hardware": v.hw_dict,
        "sim_hardware": v.hw.to_dict(),
        "load_average": {"before": load_before, "after": load_after},
        "busy": busy,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": sys.version.split()[0],
                    "device_name": (v.prof.meta or {}).get("device_name")},
        "timings_s": timings,
    }
