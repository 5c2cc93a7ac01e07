"""``validate``: profile -> calibrate -> simulate -> run -> emulate -> compare -> report.

Every consumer gets the same numbers (model, batch size, micro-batches, the
partition found once from the profile, iterations, seed), so the report's
differences are modelling errors. The steps (each timed in ``summary.json``):

1. **profile** the model on the ranks' device with the ranks' thread count, at
   the full batch and at the action batches (micro-batch, worker slice); for CPU
   ranks a second time while the other ranks' worth of co-runners train the same
   model (:func:`~stalesim.validate.costmodel.contended_profile`); measure the
   per-action runtime overhead (:func:`~stalesim.validate.costmodel.measure_overhead`);
2. **calibrate** the link (``stalesim calibrate`` machinery) unless ``--hardware``;
3. **simulate** each schedule and the 1-rank sequential baseline with that cost model;
4. **run** every schedule in one process group (``executor.run_local``), and the
   baseline on one rank;
5. **emulate** each schedule for a few iterations (same config) for the loss check;
6. **compare** and write ``report.md``, ``summary.json``, figures and traces.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.validate.config import ValidateConfig, check_config

Progress = Callable[[str], None]


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats -> None, tuples -> lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def profile_sizes(batch_size: int, microbatches: int, n_devices: int) -> list[int]:
    """The full batch first, then every action batch a schedule of this run uses."""
    sizes = [batch_size]
    for b in (batch_size // microbatches, batch_size // n_devices):
        if b >= 1 and b not in sizes:
            sizes.append(b)
    return sizes


def train_config(cfg: ValidateConfig, name: str, n_devices: int, ppv: list[int], iterations: int,
                 device: str = "cpu") -> Any:
    """The TrainConfig every consumer runs for schedule ``name``."""
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import get_spec

    spec = get_spec(name)
    dp = spec.data_parallel
    return TrainConfig(
        model=cfg.model, dataset=cfg.dataset, schedule=name,
        stages=1 if dp or n_devices == 1 else None,
        ppv=None if dp or n_devices == 1 else list(ppv),
        microbatches=cfg.microbatches if spec.uses_micro else 1,
        workers=n_devices if dp else 1,
        iterations=iterations, batch_size=cfg.batch_size, lr=cfg.lr, momentum=0.9,
        seed=cfg.seed, device=device, data_dir=cfg.data_dir,
        # the run's switch point, also when the emulation checks a shorter prefix
        switch=(cfg.iterations // 2) if spec.switches else None,
    ).check()


def validate(cfg: ValidateConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run the whole validation; returns the summary (also written to ``cfg.out``)."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    devs, scheds = check_config(cfg)
    out = Path(cfg.out)
    N = devs.count
    timings: dict[str, float] = {}
    load_before = _loadavg()
    t_all = time.perf_counter()
    steps = 6

    if cfg.dataset != "synthetic":  # fail now (one line), not inside a rank later
        from stalesim.runtime.data import load_dataset

        load_dataset(train_config(cfg, "sequential", 1, [], cfg.iterations))

    # 1. profile + cost model ---------------------------------------------------
    t0 = time.perf_counter()
    from stalesim.validate.costmodel import CostModel, contended_profile, measure_overhead
    from stalesim.workloads.profiler import profile_model

    dev0 = devs.device_for(0)
    sizes = profile_sizes(cfg.batch_size, cfg.microbatches, N)
    notes: list[str] = []
    want_contention = devs.kind == "cpu" and N > 1 and cfg.contention
    contended = None
    if cfg.profile:
        prof = _reuse_profile(cfg.profile, cfg, "--profile")
        say(f"[validate 1/{steps}] profile from {cfg.profile}")
    elif want_contention and not cfg.contended_profile:
        from stalesim.validate.costmodel import paired_profiles

        say(f"[validate 1/{steps}] profiling {cfg.model} at batch {sizes} on {dev0} "
            f"({cfg.threads} thread(s), {cfg.repeats} repeats), alternating with {N - 1} co-runner(s) busy")
        prof, contended = paired_profiles(cfg.model, sizes, co_runners=N - 1, threads=cfg.threads,
                                          device=dev0, repeats=cfg.repeats,
                                          co_batch=sizes[-1] if len(sizes) > 1 else sizes[0],
                                          timeout_s=cfg.timeout_s)
    else:
        say(f"[validate 1/{steps}] profiling {cfg.model} at batch {sizes} on {dev0} "
            f"({cfg.threads} thread(s), {cfg.repeats} repeats)")
        prof = profile_model(cfg.model, sizes, device=dev0, threads=cfg.threads, repeats=cfg.repeats,
                             warmup=2, seed=cfg.seed)
    if contended is not None:
        pass
    elif cfg.contended_profile and cfg.contention:
        contended = _reuse_profile(cfg.contended_profile, cfg, "--contended-profile")
    elif want_contention:
        say(f"[validate 1/{steps}] profiling again with {N - 1} co-runner(s) busy (contention)")
        contended = contended_profile(cfg.model, sizes, co_runners=N - 1, threads=cfg.threads,
                                      device=dev0, repeats=cfg.repeats,
                                      co_batch=sizes[-1] if len(sizes) > 1 else sizes[0],
                                      timeout_s=cfg.timeout_s)
    if cfg.overhead:
        overhead = measure_overhead(threads=cfg.threads, device=dev0)
    else:
        overhead = {"F": 0.0, "B": 0.0, "U": 0.0, "LOSS": 0.0}
    cm = CostModel(prof, contended, overhead, notes)
    prof.to_json(out / "profile.json")
    if contended is not None:
        contended.to_json(out / "profile_contended.json")
    timings["profile_s"] = time.perf_counter() - t0

    # 2. hardware ------------------------------------------------------------------
    t0 = time.perf_counter()
    from stalesim.atomic import write_json_atomic
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import hardware_from_dict

    if cfg.hardware:
        say(f"[validate 2/{steps}] hardware from {cfg.hardware} (no calibration)")
        hw_dict = json.loads(Path(cfg.hardware).read_text())
    elif N > 1:
        from stalesim.workloads.calibrate import calibrate

        backend = "nccl" if devs.kind == "cuda" else "gloo"
        say(f"[validate 2/{steps}] calibrating the {backend} link with {N} ranks")
        hw_dict = calibrate(backend, N, sizes=[4 * 4**k for k in range(11)],
                            repeats=cfg.calibrate_repeats, timeout_s=cfg.timeout_s)
    else:
        hw_dict = {"schema_version": 1, "device": "cpu-core" if devs.kind == "cpu" else "h100-sxm",
                   "link": "ideal", "comm_overlaps_compute": devs.kind != "cpu",
                   "cpu_comm_occupancy": 0.0}
    hardware = hardware_from_dict(hw_dict)
    hw = SimHardware.from_hardware(hardware)
    write_json_atomic(out / "hardware.json", _clean(hw_dict))
    timings["calibrate_s"] = time.perf_counter() - t0

    # 3. the 1-rank baseline (speed-up denominator; its action gaps calibrate dispatch) -----
    t0 = time.perf_counter()
    from executor.job import make_job
    from executor.launch import run_local
    from stalesim.devices import Devices
    from stalesim.validate.measured import dispatch_gap, measured_timing

    say(f"[validate 3/{steps}] running the 1-rank baseline (sequential, S=1, {cfg.iterations} iterations)")
    from stalesim.schedule import build_schedule

    base_devs = Devices(devs.kind, devs.ids[:1])
    base_tc = train_config(cfg, "sequential", 1, [], cfg.iterations)
    base_job = make_job(base_tc, out=str(out / "runs" / "baseline-1rank"), evaluate=False,
                        label="baseline", keep_rows=True)
    base_meas = run_local(base_job, base_devs, timeout_s=cfg.timeout_s, threads=cfg.threads)
    base_t = measured_timing(base_meas, build_schedule(base_tc.schedule_config(cfg.iterations)))
    if cfg.overhead:
        cm.dispatch_s = dispatch_gap(base_meas["rows"], tuple(base_t["window_s"]))
    timings["baseline_s"] = time.perf_counter() - t0

    # 3. simulate ------------------------------------------------------------------
    t0 = time.perf_counter()
    from stalesim.sim.model import resolve_cuts
    from stalesim.validate.costmodel import simulate_with_costs

    S = N
    if cfg.ppv is not None:
        ppv = list(cfg.ppv)
    elif S > 1:
        _cuts, ppv = resolve_cuts(prof, S, None, cfg.batch_size)
    else:
        ppv = []
    # virtual stages: V chunks per device, S = N x V stages, their own balanced partition
    ppvs = {name: _ppv_for(name, N, ppv, cfg, prof) for name in scheds}
    say(f"[validate 3/{steps}] simulating {len(scheds)} schedule(s) (S={S}, ppv={ppv}, "
        f"B={cfg.batch_size}, M={cfg.microbatches}, {cfg.iterations} iterations)")
    sims: dict[str, Any] = {}
    sim_info: dict[str, dict] = {}
    (out / "traces").mkdir(parents=True, exist_ok=True)
    for name in scheds:
        # the schedule every consumer of this row builds: the run's TrainConfig -> ScheduleConfig
        tc = train_config(cfg, name, N, ppvs[name], cfg.iterations)
        r, info = simulate_with_costs(cm, hw, tc.schedule_config(cfg.iterations), ppv=ppvs[name] or None,
                                      batch_size=cfg.batch_size)
        sims[name] = r
        sim_info[name] = info
        r.write_trace(out / "traces" / f"{name}.sim.json")
    base_sim, _ = simulate_with_costs(cm, hw, base_tc.schedule_config(cfg.iterations), ppv=None,
                                      batch_size=cfg.batch_size)
    timings["simulate_s"] = time.perf_counter() - t0

    # 4. run -----------------------------------------------------------------------
    t0 = time.perf_counter()
    say(f"[validate 4/{steps}] running {len(scheds)} schedule(s) on {devs} "
        f"({cfg.iterations} iterations each)")
    jobs = []
    for name in scheds:
        tc = train_config(cfg, name, N, ppvs[name], cfg.iterations, device="cpu")
        jobs.append(make_job(tc, out=str(out / "runs" / name), evaluate=False, label=name,
                             keep_rows=True))
    measured = _run_jobs(jobs, devs, cfg, say)
    timings["run_s"] = time.perf_counter() - t0

    # 5. emulate -------------------------------------------------------------------
    t0 = time.perf_counter()
    E = min(cfg.emulate_iterations, cfg.iterations)
    emulated: dict[str, list | None] = {}
    if E > 0:
        say(f"[validate 5/{steps}] emulating {len(scheds)} schedule(s) for {E} iterations on {dev0}")
        emulated = _emulate_all(cfg, scheds, N, ppvs, E, dev0)
    timings["emulate_s"] = time.perf_counter() - t0

    # 6. compare + write -------------------------------------------------------------
    t0 = time.perf_counter()
    say(f"[validate 6/{steps}] comparing; writing report, summary and figures to {out}")
    from stalesim.validate.compare import aggregate, goals_met, make_row
    from stalesim.validate.measured import peak_memory
    rows = []
    mtimes: dict[str, dict] = {}
    for name in scheds:
        r = sims[name]
        m = measured.get(name)
        if m is None or "error" in m:
            mt = {"iteration_time_s": None, "utilization": [], "window": [], "window_s": [0, 0]}
        else:
            mt = measured_timing(m, sim_info[name]["schedule"])
        mtimes[name] = mt
        replay_it = None
        if m is not None and m.get("rows"):
            from stalesim.sim import SimOptions, simulate
            from stalesim.validate.costmodel import replay_costs

            rc = replay_costs(sim_info[name]["costs"], m["rows"], tuple(mt["window_s"]))
            rr = simulate(rc, sim_info[name]["schedule"], hw, SimOptions(keep_timeline=False))
            replay_it = rr.iteration_time_s
        extra = {
            "stages": r.stages, "workers": r.workers, "microbatches": r.microbatches,
            "ppv": sim_info[name]["ppv"], "action_batch": sim_info[name]["action_batch"],
            "contention_phi": sim_info[name]["phi"], "fixed_point_rounds": sim_info[name]["rounds"],
            "steady_window": r.steady_window,
            "executor_iteration_time_s": None if m is None else m.get("iteration_time_s"),
            "versions_match_ir": None if m is None else m.get("versions_match_ir"),
            "emulated_iterations": E,
            "replay_iteration_time_s": replay_it,
            "replay_time_error": (None if replay_it is None or not mt["iteration_time_s"]
                                  else (replay_it - mt["iteration_time_s"]) / mt["iteration_time_s"]),
            "error": None if m is None else m.get("error"),
        }
        rows.append(make_row(
            name,
            predicted={"iteration_time_s": r.iteration_time_s, "utilization": r.utilization,
                       "peak_memory_bytes": r.peak_memory_bytes},
            measured={"iteration_time_s": mt["iteration_time_s"], "utilization": mt["utilization"],
                      "peak_memory_bytes": None if m is None else peak_memory(m)},
            predicted_baseline_s=base_sim.iteration_time_s,
            measured_baseline_s=base_t["iteration_time_s"],
            emulated_losses=emulated.get(name),
            executed_losses=None if m is None else m.get("losses"),
            extra=extra))
    agg = aggregate(rows)
    load_after = _loadavg()
    summary: dict[str, Any] = {
        "command": cfg.command or "stalesim validate",
        "config": cfg.to_dict(),
        "devices": str(devs),
        "schedules": scheds,
        "ppv": ppv,
        "rows": rows,
        **agg,
        "goals_met": goals_met(agg),
        "baseline": {"predicted_iteration_time_s": base_sim.iteration_time_s,
                     "measured_iteration_time_s": base_t["iteration_time_s"],
                     "what": "sequential, S=1, on one rank of the same device kind and thread count"},
        "cost_model": cm.to_dict(),
        "profile": prof.to_dict(),
        "contended_profile_meta": None if contended is None else contended.meta,
        "hardware": hw_dict,
        "sim_hardware": hw.to_dict(),
        "load_average": {"before": load_before, "after": load_after},
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": sys.version.split()[0], "device_name": (prof.meta or {}).get("device_name")},
        "timings_s": timings,
    }
    from stalesim.validate.report import write_outputs

    files = write_outputs(out, summary, sims=sims, measured=measured, mtimes=mtimes,
                          emulated=emulated)
    timings["report_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_all
    summary["files"] = files
    write_json_atomic(out / "summary.json", _clean(summary))
    from stalesim.validate.report import write_report

    write_report(out, _clean(summary))
    return _clean(summary)


def _reuse_profile(path: str, cfg: ValidateConfig, flag: str) -> Any:
    from stalesim.workloads.profile import load_profile

    prof = load_profile(path)
    if prof.model != cfg.model:
        raise StalesimError(f"{flag}: profile of {prof.model!r}, but --model is {cfg.model!r}")
    if prof.threads is not None and prof.device == "cpu" and prof.threads != cfg.threads:
        raise StalesimError(f"{flag}: measured with {prof.threads} thread(s), the ranks use {cfg.threads}")
    return prof


def _run_jobs(jobs: list[dict], devs: Any, cfg: ValidateConfig, say: Progress) -> dict[str, dict]:
    """All jobs in one process group; if that fails, each alone so one bad schedule
    does not hide the others (its row then carries the error)."""
    from executor.launch import run_local

    try:
        res = run_local(jobs, devs, timeout_s=cfg.timeout_s, threads=cfg.threads)
        return {j["label"]: r for j, r in zip(jobs, res)}
    except StalesimError as exc:
        if len(jobs) == 1:
            return {jobs[0]["label"]: {"error": str(exc)}}
        say(f"[validate] the joint run failed ({exc}); running each schedule alone")
    out: dict[str, dict] = {}
    for j in jobs:
        try:
            out[j["label"]] = run_local(j, devs, timeout_s=cfg.timeout_s, threads=cfg.threads)
        except StalesimError as exc:
            out[j["label"]] = {"error": str(exc)}
    return out


def _ppv_for(name: str, N: int, ppv: list[int], cfg: ValidateConfig, prof: Any) -> list[int]:
    """The run's PPV for ``name``: the shared one (S = N), or for a schedule with V chunks per
    device (S = N x V) the given PPV if it has S - 1 entries, else the balanced partition."""
    from stalesim.schedule import get_spec
    from stalesim.sim.model import resolve_cuts

    spec = get_spec(name)
    S = N * spec.stages_per_device
    if spec.data_parallel or S == N:
        return ppv
    if cfg.ppv is not None and len(cfg.ppv) + 1 == S:
        return list(cfg.ppv)
    return list(resolve_cuts(prof, S, None, cfg.batch_size)[1])


def _emulate_all(cfg: ValidateConfig, scheds: list[str], N: int, ppvs: dict[str, list[int]], E: int,
                 device: str) -> dict[str, list | None]:
    import torch

    from stalesim.emulator.replay import Emulator

    out: dict[str, list | None] = {}
    old = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(cfg.threads)
    try:
        for name in scheds:
            tc = train_config(cfg, name, N, ppvs[name], E, device=device)  # the run's switch point
            summ = Emulator(tc, progress=False).run()
            out[name] = summ.get("losses")
    finally:
        torch.set_num_threads(old)
    return out
