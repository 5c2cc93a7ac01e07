"""The steps of ``validate``, each a function of the run's :class:`Validation` state.

1. :func:`profile_step`: profile the model on the ranks' device and thread count at
   the full batch and every action batch; for CPU ranks again with the other ranks'
   worth of co-runners busy; the per-action runtime overhead (:mod:`.corunners`).
2. :func:`calibrate_step`: the link (``stalesim calibrate``) unless ``--hardware``.
3. :func:`baseline_step`: the 1-rank sequential run (speed-up denominator; its gaps
   between actions calibrate the dispatch cost).
4. :func:`run_step`: every schedule on the ranks, in one process group, in rounds; after
   each round one pass of the stage timing (every stage layout on its real stages, alone
   and with co-runners busy; :mod:`.stagetime`), which the runs' measurements never feed.
5. :func:`simulate_step`: every schedule with the cost model (:mod:`.costmodel`),
   each from the run's own ``TrainConfig.schedule_config`` (the same Schedule the
   executor runs).
6. :func:`emulate_step`: a few iterations of each, for the loss comparison.
7. :func:`compare_step`: rows (predicted vs measured vs replayed, emulated vs executed).

:mod:`.workflow` runs them in order, times them and writes the outputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.atomic import ensure_dir
from stalesim.errors import StalesimError
from stalesim.validate.config import ValidateConfig

if TYPE_CHECKING:
    from stalesim.executor.spec import Job
    from stalesim.validate.tbscalars import ValidationScalars

Progress = Callable[[str], None]
STEPS = 6  # numbered steps shown in the progress lines
# message sizes the per-message costs are fitted over (bytes): labels to large activations
COMM_SIZES = (64, 4096, 65536, 262144, 1048576)


@dataclass
class Validation:
    """Everything one validation computes, step by step."""

    cfg: ValidateConfig
    devs: Any  # stalesim.devices.Devices
    schedules: list[str]
    out: Path
    say: Progress
    prof: Any = None  # Profile alone
    contended: Any = None  # Profile with co-runners
    cm: Any = None  # CostModel
    hw_dict: dict[str, Any] = field(default_factory=dict)
    hw: Any = None  # SimHardware
    ppv: list[int] = field(default_factory=list)  # the shared PPV (S = devices)
    ppvs: dict[str, list[int]] = field(default_factory=dict)  # each schedule's (S = devices x V)
    base_sched: Any = None
    base_measured: dict[str, Any] = field(default_factory=dict)
    base_timing: dict[str, Any] = field(default_factory=dict)
    base_sim: Any = None
    sims: dict[str, Any] = field(default_factory=dict)
    sim_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)  # the median run of each
    mtimes: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # every repeat, round order
    base_runs: list[dict[str, Any]] = field(default_factory=list)
    mem_facts: dict[tuple, Any] = field(default_factory=dict)  # stage layout -> memory facts
    emulated: dict[str, list | None] = field(default_factory=dict)
    emulated_iterations: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    # --tensorboard DIR: its writers, open for the whole validation (stalesim.validate.tbscalars)
    tensorboard: ValidationScalars | None = None
    # per schedule, device, stage and term: predicted / measured / replayed ms per iteration
    # (:mod:`stalesim.validate.breakdown`), for the median run of each schedule
    attribution: list[dict[str, Any]] = field(default_factory=list)
    resumed: Any = None  # the finished rounds read back by --resume (checkpoint.Resumed)

    @property
    def n(self) -> int:
        return int(self.devs.count)

    @property
    def device0(self) -> str:
        return str(self.devs.device_for(0))


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


def clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats -> None, tuples -> lists."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


# ------------------------------------------------------------------------ 1. profile
def profile_step(v: Validation) -> None:
    from stalesim.validate.corunners import contended_profile, measure_overhead, paired_profiles, profiled_model
    from stalesim.workloads.profiler import profile_model

    cfg, say, N, dev0 = v.cfg, v.say, v.n, v.device0
    sizes = profile_sizes(cfg.batch_size, cfg.microbatches, N)
    co_batch = sizes[-1] if len(sizes) > 1 else sizes[0]
    want_contention = v.devs.kind == "cpu" and N > 1 and cfg.contention
    contended = None
    if v.resumed is not None:
        _resumed_profiles(v)
        return
    if cfg.profile:
        prof = _reuse_profile(cfg.profile, cfg, "--profile")
        say(f"[validate 1/{STEPS}] profile from {cfg.profile}")
    elif want_contention and not cfg.contended_profile:
        say(f"[validate 1/{STEPS}] profiling {cfg.model} at batch {sizes} on {dev0} "
            f"({cfg.threads} thread(s), {cfg.profile_repeats} repeats), alternating with {N - 1} co-runner(s) busy")
        prof, contended = paired_profiles(cfg.model, sizes, co_runners=N - 1, threads=cfg.threads,
                                          device=dev0, repeats=cfg.profile_repeats, co_batch=co_batch,
                                          timeout_s=cfg.timeout_s, dataset=cfg.dataset)
    else:
        say(f"[validate 1/{STEPS}] profiling {cfg.model} at batch {sizes} on {dev0} "
            f"({cfg.threads} thread(s), {cfg.profile_repeats} repeats)")
        prof = profile_model(profiled_model(cfg.model, cfg.dataset), sizes, device=dev0, threads=cfg.threads,
                             repeats=cfg.profile_repeats, warmup=2, seed=cfg.seed)
    if contended is None and cfg.contended_profile and cfg.contention:
        contended = _reuse_profile(cfg.contended_profile, cfg, "--contended-profile")
    elif contended is None and want_contention:
        say(f"[validate 1/{STEPS}] profiling again with {N - 1} co-runner(s) busy (contention)")
        contended = contended_profile(cfg.model, sizes, co_runners=N - 1, threads=cfg.threads,
                                      device=dev0, repeats=cfg.profile_repeats, co_batch=co_batch,
                                      timeout_s=cfg.timeout_s, dataset=cfg.dataset)
    overhead = (measure_overhead(threads=cfg.threads, device=dev0) if cfg.overhead
                else {"F": 0.0, "B": 0.0, "U": 0.0, "LOSS": 0.0})
    v.prof, v.contended = prof, contended
    v.cm = _cost_model(v, overhead)
    prof.to_json(v.out / "profile.json")
    if contended is not None:
        contended.to_json(v.out / "profile_contended.json")


def _resumed_profiles(v: Validation) -> None:
    """The profiles and per-action overhead the resumed validation measured (its folder's
    ``profile.json``, ``profile_contended.json`` and round files)."""
    v.say(f"[validate 1/{STEPS}] resuming: profile, calibration and {v.resumed.rounds} round(s) from {v.out}")
    prof = _reuse_profile(str(v.out / "profile.json"), v.cfg, "--resume")
    path = v.out / "profile_contended.json"
    contended = _reuse_profile(str(path), v.cfg, "--resume") if path.is_file() else None
    v.prof, v.contended = prof, contended
    v.cm = _cost_model(v, dict(v.resumed.overhead_s))


def _cost_model(v: Validation, overhead: dict[str, float]) -> Any:
    """The cost model of the profiles in ``v``, with the cores CPU ranks share (the ranks
    may outnumber them: :mod:`stalesim.validate.cores`)."""
    from stalesim.validate.cores import host_cores
    from stalesim.validate.costmodel import CostModel

    return CostModel(v.prof, v.contended, overhead, [], host_cores=host_cores() if v.devs.kind == "cpu" else None)


def _reuse_profile(path: str, cfg: ValidateConfig, flag: str) -> Any:
    from stalesim.validate.config import reused_profile

    return reused_profile(path, cfg, flag)


# ---------------------------------------------------------------------- 2. calibrate
def calibrate_step(v: Validation) -> None:
    from stalesim.atomic import write_json_atomic
    from stalesim.sim.model import SimHardware
    from stalesim.validate.costmodel import link_from_comm
    from stalesim.workloads.hardware import hardware_from_dict

    cfg, N = v.cfg, v.n
    hw_file = str(v.out / "hardware.json") if v.resumed is not None else cfg.hardware
    if hw_file:
        v.say(f"[validate 2/{STEPS}] hardware from {hw_file} (no calibration)")
        from stalesim.validate.config import read_hardware_json

        hw_dict = read_hardware_json(hw_file)
    elif N > 1:
        from stalesim.workloads.calibrate import calibrate

        backend = "nccl" if v.devs.kind == "cuda" else "gloo"
        v.say(f"[validate 2/{STEPS}] calibrating the {backend} link with {N} ranks")
        hw_dict = calibrate(backend, N, sizes=[4 * 4**k for k in range(11)],
                            repeats=cfg.calibrate_repeats, timeout_s=cfg.timeout_s, devices=v.devs)
    else:
        hw_dict = {"schema_version": 1, "device": "cpu-core" if v.devs.kind == "cpu" else "h100-sxm",
                   "link": "ideal", "comm_overlaps_compute": v.devs.kind != "cpu",
                   "cpu_comm_occupancy": 0.0}
    v.hw = SimHardware.from_hardware(hardware_from_dict(hw_dict))
    if N > 1 and cfg.overhead:
        comm = hw_dict.get("executor_comm")
        if comm is None:
            from stalesim.validate.commcal import measure_comm

            v.say(f"[validate 2/{STEPS}] calibrating the executor's per-message costs (2 ranks)")
            # the run's first two ranks, each on its own device (commcal.comm_rank_devices)
            comm = measure_comm(COMM_SIZES, repeats=cfg.calibrate_repeats * 5, devices=v.devs,
                                timeout_s=cfg.timeout_s)
            hw_dict = dict(hw_dict, executor_comm=comm)
        v.cm.comm = comm
        v.hw = link_from_comm(v.hw, comm, (hw_dict.get("allreduce") or {}).get("measured"), workers=N)
    v.hw_dict = hw_dict
    if v.resumed is None:  # a resumed validation read it from there
        write_json_atomic(v.out / "hardware.json", clean(hw_dict))


# ----------------------------------------------------------------------- 3. baseline
def baseline_step(v: Validation) -> None:
    """Round 0 of the 1-rank baseline (the others run interleaved in :func:`run_step`);
    its gaps between actions calibrate the dispatch cost before anything is predicted."""
    from stalesim.schedule import build_schedule
    from stalesim.validate.measured import dispatch_gap, gaps_after, measured_timing

    cfg = v.cfg
    v.say(f"[validate 3/{STEPS}] running the 1-rank baseline (sequential, S=1, {cfg.iterations} iterations)")
    base_tc = train_config(cfg, "sequential", 1, [], cfg.iterations)
    v.base_sched = build_schedule(base_tc.schedule_config(cfg.iterations))
    if v.resumed is not None:
        v.base_runs = list(v.resumed.base_runs[:1])
    else:
        _run_baseline(v, 0)
    v.base_measured = v.base_runs[0]
    if "error" in v.base_measured:
        raise StalesimError(f"validate: the 1-rank baseline failed: {v.base_measured['error']}")
    v.base_timing = measured_timing(v.base_measured, v.base_sched)
    if cfg.overhead:
        w = tuple(v.base_timing["window_s"])
        v.cm.dispatch_s = dispatch_gap(v.base_measured["rows"], w)
        v.cm.gaps_s = gaps_after(v.base_measured["rows"], w)
    if v.resumed is None:
        # the machine's terms as `simulate/sweep/plan --calibration` read them: what this run
        # measured predicts other configurations on the same ranks
        from stalesim.cost.calibration import write_calibration

        write_calibration(v.out / "calibration.json", v.cm.calibration(source="validate"))


def run_dir(out: Path, name: str, k: int) -> Path:
    """Run folder of repeat ``k`` of ``name``: ``runs/<name>`` for the first, ``runs/<name>.r<k>`` after."""
    return out / "runs" / (name if k == 0 else f"{name}.r{k}")


def _run_baseline(v: Validation, k: int) -> None:
    from stalesim.executor.launch import run_local
    from stalesim.executor.spec import make_job

    cfg = v.cfg
    base_devs = v.devs.first(1)
    job = make_job(train_config(cfg, "sequential", 1, [], cfg.iterations),
                   out=str(run_dir(v.out, "baseline-1rank", k)), evaluate=False, label="baseline",
                   keep_rows=True)
    try:
        v.base_runs.append(run_local(job, base_devs, timeout_s=cfg.timeout_s, threads=cfg.threads))
    except StalesimError as exc:
        v.base_runs.append({"error": str(exc)})


# ----------------------------------------------------------------------- 4. simulate
def partition(v: Validation) -> None:
    """The shared PPV (from ``--ppv`` or the profile) and each schedule's, once: the runs and
    the predictions cut the model the same way."""
    from stalesim.sim.model import resolve_cuts

    cfg, N = v.cfg, v.n
    if v.ppvs and set(v.ppvs) >= set(v.schedules):
        return
    if cfg.ppv is not None:
        v.ppv = list(cfg.ppv)
    elif N > 1:
        _cuts, v.ppv = resolve_cuts(v.prof, N, None, cfg.batch_size)
    # virtual stages: V chunks per device, S = N x V stages, their own balanced partition
    v.ppvs = {name: _ppv_for(name, N, v.ppv, cfg, v.prof) for name in v.schedules}


def _run_configs(v: Validation) -> list[Any]:
    """The TrainConfig of every schedule's run and of the 1-rank baseline."""
    cfg = v.cfg
    return [*(train_config(cfg, name, v.n, v.ppvs[name], cfg.iterations) for name in v.schedules),
            train_config(cfg, "sequential", 1, [], cfg.iterations)]


def simulate_step(v: Validation) -> None:
    from stalesim.validate.costmodel import simulate_with_costs

    cfg, N = v.cfg, v.n
    partition(v)
    v.say(f"[validate 5/{STEPS}] simulating {len(v.schedules)} schedule(s) (S={N}, ppv={v.ppv}, "
          f"B={cfg.batch_size}, M={cfg.microbatches}, {cfg.iterations} iterations)")
    ensure_dir(v.out / "traces")  # a file in the way is one line, not a traceback
    from stalesim.executor.rank import RECV_AHEAD

    tcs = {name: train_config(cfg, name, N, v.ppvs[name], cfg.iterations) for name in v.schedules}
    if cfg.overhead:  # layouts the run step did not time (it normally times them all)
        _stage_times(v, _run_configs(v))
    for name in v.schedules:
        # the schedule every consumer of this row builds: the run's TrainConfig -> ScheduleConfig
        tc = tcs[name]
        r, info = simulate_with_costs(v.cm, v.hw, tc.schedule_config(cfg.iterations), ppv=v.ppvs[name] or None,
                                      batch_size=cfg.batch_size, memory_facts=_memory_facts(v, tc),
                                      recv_ahead=RECV_AHEAD)
        info["pass_predictions_s"] = _pass_predictions(v, tc, name)
        v.sims[name], v.sim_info[name] = r, info
        r.write_trace(v.out / "traces" / f"{name}.sim.json")
    v.base_sim, _ = simulate_with_costs(v.cm, v.hw, v.base_sched.config, ppv=None,
                                        batch_size=cfg.batch_size)


def _pass_predictions(v: Validation, tc: Any, name: str) -> list[float]:
    """The iteration time predicted from each timing pass's stage times alone (none when
    fewer than two passes kept theirs): how far the prediction moves with the moment its
    stage times were taken, the prediction's counterpart of the runs' noise floor."""
    from stalesim.executor.rank import RECV_AHEAD
    from stalesim.validate.costmodel import simulate_with_costs

    if v.cm is None or v.cm.timing_passes() < 2:
        return []
    return [simulate_with_costs(v.cm.of_pass(k), v.hw, tc.schedule_config(v.cfg.iterations),
                                ppv=v.ppvs[name] or None, batch_size=v.cfg.batch_size,
                                recv_ahead=RECV_AHEAD)[0].iteration_time_s
            for k in range(v.cm.timing_passes())]


def _layouts(v: Validation, tcs: list[Any]) -> dict[Any, Any]:
    """The stage layouts of the runs ``tcs`` that have no stage times yet, each with one run
    that has it (layouts that schedules share are timed once)."""
    from stalesim.schedule import build_schedule
    from stalesim.validate.stagetime import layout_key

    todo: dict[Any, Any] = {}
    for tc in tcs:
        key = layout_key(build_schedule(tc.schedule_config(tc.iterations)), tc.ppv, tc.batch_size)
        if key not in v.cm.stage_times:
            todo.setdefault(key, tc)
    return todo


def _stage_times(v: Validation, tcs: list[Any]) -> None:
    """Time the stage layouts of the runs ``tcs`` that have no stage times yet, alone, in
    passes one after the other (:func:`stalesim.validate.stagetime.measure_layouts`)."""
    from stalesim.validate.stagetime import measure_layouts

    todo = _layouts(v, tcs)
    if not todo:
        return
    v.say(f"[validate 5/{STEPS}] timing {len(todo)} stage layout(s) on their real stages")
    times = measure_layouts(list(todo.values()), device=v.devs.device_for(0), threads=v.cfg.threads,
                            full_batch=v.cfg.batch_size)
    v.cm.stage_times.update(zip(todo, times))


def _layout_timer(v: Validation) -> tuple[list[Any], Any]:
    """The layouts to time between the rounds of the runs, and their :class:`LayoutTimer`
    (``None`` when nothing is to be timed: no cost model, ``--no-overhead``, or all timed)."""
    from stalesim.validate.stagetime import LayoutTimer, rounds_per_pass

    if v.cm is None or not v.cfg.overhead:
        return [], None
    todo = _layouts(v, _run_configs(v))
    if not todo:
        return [], None
    return list(todo), LayoutTimer(list(todo.values()), device=str(v.devs.device_for(0)), threads=v.cfg.threads,
                                   rounds=rounds_per_pass(v.cfg.repeats), full_batch=v.cfg.batch_size,
                                   ranks=v.devs.count)


def _time_pass(v: Validation, timer: Any) -> None:
    """One pass of ``timer`` over every layout: on CPU ranks alone and with the other ranks'
    worth of co-runners busy (:class:`stalesim.validate.corunners.CoRunners`)."""
    from stalesim.validate.corunners import CoRunners

    cfg, N = v.cfg, v.n
    if not (v.devs.kind == "cpu" and N > 1 and cfg.contention):
        timer.run_pass()
        return
    co_batch = profile_sizes(cfg.batch_size, cfg.microbatches, N)[-1]  # as the contended profile
    with CoRunners(cfg.model, co_batch, N - 1, threads=cfg.threads, device=v.device0, dataset=cfg.dataset,
                   timeout_s=cfg.timeout_s, running=False) as co:
        timer.run_pass(co)


def _memory_facts(v: Validation, tc: Any) -> list[dict[str, int]] | None:
    """Per-stage bytes measured as the executor counts them (one forward per stage, cached
    per stage layout, action batch and auxiliary heads), on the run's device (on a GPU with
    the stage's CUDA term); None if it cannot be measured."""
    from stalesim.schedule import build_schedule
    from stalesim.validate.costmodel import measured_memory_facts

    sched = build_schedule(tc.schedule_config(min(tc.iterations or 4, 8)))
    key = (sched.stages, tuple(tc.ppv or ()), sched.action_batch_size(tc.batch_size), sched.local_loss,
           tuple(sorted(sched.split_stages())))  # split stages also measure what a deferred W holds
    cache = v.mem_facts
    if key not in cache:
        try:
            cache[key] = measured_memory_facts(tc, sched, device=v.devs.device_for(0))
        except Exception as exc:  # noqa: BLE001 - memory is reported, not required
            v.say(f"[validate] memory facts unavailable ({type(exc).__name__}: {exc})")
            cache[key] = None
    return cache[key]


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


# ---------------------------------------------------------------------------- 5. run
def round_order(names: list[str], k: int) -> list[str]:
    """Schedules of round ``k``, rotated by ``k``: every schedule runs once per round
    (round-robin, so slow drift of the machine hits all alike) and no schedule is
    always the first job after the process group starts."""
    if not names:
        return []
    r = k % len(names)
    return names[r:] + names[:r]


def run_step(v: Validation) -> None:
    """``cfg.repeats`` rounds; each round runs the 1-rank baseline (round 0 ran in
    :func:`baseline_step`), then every schedule once, in one process group, then one pass
    of the stage timing (:func:`_time_pass`): the stage times the predictions use see the
    same moments of the machine as the runs, which they never read."""
    from stalesim.executor.spec import make_job
    from stalesim.validate.checkpoint import save_round

    cfg = v.cfg
    K = cfg.repeats
    partition(v)
    keys, timer = _layout_timer(v)
    v.say(f"[validate 4/{STEPS}] running {len(v.schedules)} schedule(s) on {v.devs} "
          f"({cfg.iterations} iterations each, {K} interleaved repeat(s))"
          + (f", timing {len(keys)} stage layout(s) after each round" if timer is not None else ""))
    v.runs = {name: [] for name in v.schedules}
    done, timer = _resume_rounds(v, keys, timer)
    if v.tensorboard is not None:  # the rounds a resumed validation read back, drawn again
        v.tensorboard.start(v.runs)
    for k in range(done, K):
        if k > 0:
            _run_baseline(v, k)
        names = round_order(v.schedules, k)
        jobs = {name: make_job(train_config(cfg, name, v.n, v.ppvs[name], cfg.iterations, device="cpu"),
                               out=str(run_dir(v.out, name, k)), evaluate=False, label=name, keep_rows=True)
                for name in names}
        got = _run_jobs(jobs, v.devs, cfg, v.say)
        for name in names:
            v.runs[name].append(got[name])
        if timer is not None:
            _time_pass(v, timer)
        save_round(v.out, cfg, k, overhead_s=v.cm.overhead_s if v.cm is not None else {},
                   base_run=v.base_runs[k], runs=got, timer=timer)
        if v.tensorboard is not None:
            v.tensorboard.round(k, got)
        if K > 1:
            v.say(f"[validate 4/{STEPS}] round {k + 1}/{K} done")
    if timer is not None:
        v.cm.stage_times.update(zip(keys, timer.times()))


def _resume_rounds(v: Validation, keys: list[Any], timer: Any) -> tuple[int, Any]:
    """Rounds already done and the stage timer to go on with: none and ``timer`` for a new
    validation; for ``--resume``, the finished rounds' runs, baselines and timer restored."""
    r = v.resumed
    if r is None:
        return 0, timer
    if (timer is None) != (r.timer is None) or (r.timer is not None and r.timer["layouts"] != len(keys)):
        raise StalesimError(f"--resume: the stage layouts timed in {v.out} are not this validation's")
    v.runs = {name: list(r.runs.get(name, [])) for name in v.schedules}
    if any(len(runs) != r.rounds for runs in v.runs.values()):
        raise StalesimError(f"--resume: the rounds in {v.out} did not run every schedule of this validation")
    v.base_runs = list(r.base_runs)
    if timer is not None and r.timer is not None:
        timer.restore(r.timer)  # the samples read back, onto the layouts this validation built again
    return r.rounds, timer


def _run_jobs(jobs: dict[str, Job], devs: Any, cfg: ValidateConfig, say: Progress) -> dict[str, dict]:
    """All jobs (by schedule name) in one process group; if that fails, each alone so one bad
    schedule does not hide the others (its row then carries the error)."""
    from stalesim.executor.launch import run_local

    try:
        res = run_local(list(jobs.values()), devs, timeout_s=cfg.timeout_s, threads=cfg.threads)
        return dict(zip(jobs, res))
    except StalesimError as exc:
        if len(jobs) == 1:
            return {name: {"error": str(exc)} for name in jobs}
        say(f"[validate] the joint run failed ({exc}); running each schedule alone")
    out: dict[str, dict] = {}
    for name, j in jobs.items():
        try:
            out[name] = run_local(j, devs, timeout_s=cfg.timeout_s, threads=cfg.threads)
        except StalesimError as exc:
            out[name] = {"error": str(exc)}
    return out


# ------------------------------------------------------------------------ 6. emulate
def emulate_step(v: Validation) -> None:
    import torch

    from stalesim.emulator.replay import Emulator

    cfg = v.cfg
    E = v.emulated_iterations = min(cfg.emulate_iterations, cfg.iterations)
    if E <= 0:
        return
    v.say(f"[validate 6/{STEPS}] emulating {len(v.schedules)} schedule(s) for {E} iterations on {v.device0}")
    old = torch.get_num_threads()
    if v.device0 == "cpu":
        torch.set_num_threads(cfg.threads)
    try:
        for name in v.schedules:
            tc = train_config(cfg, name, v.n, v.ppvs[name], E, device=v.device0)  # the run's switch point
            v.emulated[name] = Emulator(tc, progress=False).run().get("losses")
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------------ 7. compare
def compare_step(v: Validation) -> None:
    """One row per schedule: predicted vs the median of the measured repeats (and the
    replay of each repeat), the noise floor of the repeats, emulated vs executed."""
    from stalesim.validate.compare import make_row, noise_floor, pick_median, within_noise
    from stalesim.validate.measured import measured_timing, peak_memory

    base_ok = [m for m in (v.base_runs or [v.base_measured]) if m and "error" not in m and m.get("rows")]
    base_times = [measured_timing(m, v.base_sched)["iteration_time_s"] for m in base_ok] if base_ok \
        else [v.base_timing.get("iteration_time_s")]
    base_med = pick_median([t for t in base_times if t is not None])
    v.base_timing = dict(v.base_timing, iteration_time_s=base_med, repeats_s=base_times,
                         noise_floor=noise_floor(base_times))
    for name in v.schedules:
        r, info = v.sims[name], v.sim_info[name]
        runs = v.runs.get(name) or ([v.measured[name]] if name in v.measured else [])
        ok = [m for m in runs if m is not None and "error" not in m]
        timings = [measured_timing(m, info["schedule"]) for m in ok]
        times = [t["iteration_time_s"] for t in timings]
        med = pick_median(times)
        rep = min(range(len(ok)), key=lambda i: abs(times[i] - med)) if ok else None
        m = ok[rep] if rep is not None else (runs[0] if runs else None)
        mt = timings[rep] if rep is not None else {"iteration_time_s": None, "utilization": [],
                                                   "window": [], "window_s": [0, 0]}
        if m is not None:
            v.measured[name] = m
        v.mtimes[name] = mt
        util = [statistics.median(u) for u in zip(*(t["utilization"] for t in timings))] if timings else []
        replays = [_replay(v, info, mm, tt) for mm, tt in zip(ok, timings)]
        rerrs = [(p - t) / t for p, t in zip(replays, times) if p is not None and t]
        noise = noise_floor(times)
        replay_med = pick_median([p for p in replays if p is not None])
        extra = {
            "stages": r.stages, "workers": r.workers, "microbatches": r.microbatches,
            "ppv": info["ppv"], "action_batch": info["action_batch"],
            "contention_phi": info["phi"], "fixed_point_rounds": info["rounds"],
            "after_wait_factors": info.get("wait_factors", {}),
            # drawn action times (costmodel.action_jitter): the median of the draws is the
            # prediction; beside it the same costs at their means
            "mean_cost_iteration_time_s": info.get("mean_costs_s"),
            "jitter_draws_s": info.get("jitter_draws_s") or [],
            "jitter_spread": info.get("jitter_spread") or {},
            "steady_window": r.steady_window,
            "repeats": len(ok),
            "measured_iteration_times_s": times,
            "noise_floor": noise,
            "predicted_pass_times_s": info.get("pass_predictions_s") or [],
            "prediction_noise": noise_floor(info.get("pass_predictions_s") or []),
            "executor_iteration_time_s": None if m is None else m.get("iteration_time_s"),
            "versions_match_ir": None if m is None else m.get("versions_match_ir"),
            "emulated_iterations": v.emulated_iterations,
            "replay_iteration_time_s": replay_med,
            "replay_time_errors": rerrs,
            "replay_time_error": pick_median(rerrs),
            "run_dir": None if m is None else m.get("run_dir"),
            "error": next((x.get("error") for x in runs if x and x.get("error")), None),
        }
        row = make_row(
            name,
            predicted={"iteration_time_s": r.iteration_time_s, "utilization": r.utilization,
                       "peak_memory_bytes": r.peak_memory_bytes},
            measured={"iteration_time_s": med, "utilization": util,
                      "peak_memory_bytes": None if m is None else peak_memory(m)},
            predicted_baseline_s=v.base_sim.iteration_time_s,
            measured_baseline_s=base_med,
            emulated_losses=v.emulated.get(name),
            executed_losses=None if m is None else m.get("losses"),
            extra=extra)
        row["time_error_within_noise"] = within_noise(row["time_error"], noise)
        row["replay_error_within_noise"] = within_noise(row["replay_time_error"], noise)
        v.rows.append(row)
        if m is not None and m.get("rows") and r.timeline is not None and mt.get("iteration_time_s"):
            v.attribution += _attribute(v, name, r, info, m, mt)


def _attribute(v: Validation, name: str, r: Any, info: dict[str, Any], m: dict[str, Any],
               mt: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted, measured and replayed time per device, stage and term of the median run."""
    from stalesim.validate.breakdown import attribution, sim_window, spans_from_rows, spans_from_sim, split

    pred = split(spans_from_sim(r), *sim_window(r), r.iteration_time_s)
    lo, hi = mt["window_s"]
    meas = split(spans_from_rows(m["rows"]), lo, hi, mt["iteration_time_s"])
    rep = _replay(v, info, m, mt, timeline=True)
    repl = split(spans_from_sim(rep), *sim_window(rep), rep.iteration_time_s) if rep is not None else None
    return attribution(name, pred, meas, repl)


def _replay(v: Validation, info: dict[str, Any], m: dict[str, Any], mt: dict[str, Any], *,
            timeline: bool = False) -> Any:
    """The simulated iteration time of this schedule with one run's measured action costs and
    spread (``timeline``: the whole SimResult, with its timeline; :func:`costmodel.replay`)."""
    from stalesim.validate.costmodel import replay

    if not m.get("rows"):
        return None
    res = replay(info["costs"], info["schedule"], v.hw, m["rows"], tuple(mt["window_s"]), keep_timeline=timeline)
    return res if timeline else res.iteration_time_s
