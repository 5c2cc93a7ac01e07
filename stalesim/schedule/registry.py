"""Schedule registry and the one entry point, :func:`build_schedule`.

``build_schedule(cfg)`` = check -> plan phases (warm-up, switch) -> generate
and join -> fold -> lower (sends/receives) -> validate (exactly once, paired,
deadlock-free) -> annotate versions. The simulator, the emulator, the executor
and ``validate`` all obtain their schedule from this call with the same
:class:`ScheduleConfig`, so every flag means the same thing to all of them.
"""

from __future__ import annotations

from dataclasses import replace

from stalesim.errors import ScheduleError
from stalesim.schedule.checks import validate
from stalesim.schedule.generators import data_parallel, pipelined, register
from stalesim.schedule.ir import Phase, Policy, Schedule, ScheduleConfig
from stalesim.schedule.lowering import lower
from stalesim.schedule.spec import ScheduleSpec
from stalesim.schedule.transforms import fold, join_phases, plan_phases
from stalesim.schedule.versions import annotate


def _specs() -> dict[str, ScheduleSpec]:
    def flush(S: int, M: int) -> int:
        return 8

    specs = [
        ScheduleSpec("sequential", pipelined.sequential, "one batch at a time, no overlap (baseline)",
                     "baseline", fast_path="critical-path", sim_batches=flush),
        ScheduleSpec("gpipe", pipelined.gpipe, "GPipe: M micro-batches, all F then all B, flush",
                     "Huang et al., GPipe (NeurIPS 2019)", uses_micro=True, fast_path="fill-drain",
                     sim_batches=flush),
        ScheduleSpec("1f1b", pipelined.one_f_one_b_flush,
                     "PipeDream-flush: 1F1B over M micro-batches, flush",
                     "Narayanan et al., PipeDream-2BW/flush (ICML 2021)", uses_micro=True,
                     fast_path="one-f-one-b", sim_batches=flush),
        ScheduleSpec("pipedream", pipelined.pipedream, "PipeDream: async 1F1B, weight stashing",
                     "Narayanan et al., PipeDream (SOSP 2019)", policy=Policy.STASH,
                     staleness_free=False, warmup_with="sequential"),
        ScheduleSpec("2bw", pipelined.two_bw, "PipeDream-2BW: async 1F1B, double-buffered weights",
                     "Narayanan et al., PipeDream-2BW (ICML 2021)", policy=Policy.DOUBLE_BUFFER,
                     uses_micro=True, staleness_free=False, warmup_with="gpipe",
                     min_microbatches=lambda S: max(1, S - 1)),
        ScheduleSpec("stale", register.stale, "stale-weights register pipeline (PPL-SGD)",
                     "Zhang & Abdelrahman, Pipelined Training with Stale Weights (2019/2021)",
                     staleness_free=False, warmup_with="sequential"),
        ScheduleSpec("hybrid", register.stale, "stale pipeline, then drain and continue sequential",
                     "Zhang & Abdelrahman, hybrid scheme", staleness_free=False,
                     warmup_with="sequential", switch_to="sequential"),
        ScheduleSpec("local", register.local, "local updates: per-stage auxiliary heads",
                     "Laskin et al., Parallel Training of Deep Networks with Local Updates (2020)",
                     local_loss=True),
        ScheduleSpec("dp", data_parallel.dp, "synchronous data parallelism, ring all-reduce",
                     "baseline", data_parallel=True, fast_path="bucketed-allreduce", sim_batches=flush),
        ScheduleSpec("pipe-sgd", data_parallel.pipe_sgd,
                     "Pipe-SGD: all-reduce of step t overlaps step t+1",
                     "Li et al., Pipe-SGD (NeurIPS 2018)", data_parallel=True, staleness_free=False,
                     warmup_with="dp", fast_path="overlapped-allreduce", sim_batches=lambda S, M: 12),
    ]
    return {s.name: s for s in specs}


SCHEDULES: dict[str, ScheduleSpec] = _specs()


def schedule_names() -> list[str]:
    return list(SCHEDULES)


def get_spec(name: str) -> ScheduleSpec:
    try:
        return SCHEDULES[name]
    except (KeyError, TypeError):
        raise ScheduleError(
            f"schedule: unknown {name!r} (known: {', '.join(SCHEDULES)})"
        ) from None


def resolve(cfg: ScheduleConfig) -> ScheduleConfig:
    """``cfg`` checked, with defaults filled in (length, hybrid switch point)."""
    cfg.check()
    spec = get_spec(cfg.schedule)
    spec.check(cfg)
    if cfg.batches is None:
        cfg = replace(cfg, batches=spec.default_batches(cfg))
        cfg.check()
    if spec.switches and cfg.switch is None:
        cfg = replace(cfg, switch=(cfg.batches or 0) // 2)
    return cfg


def phases_of(cfg: ScheduleConfig) -> list[Phase]:
    """The phases (warm-up, schedule proper, switch) of ``cfg`` without building actions."""
    cfg = resolve(cfg)
    return plan_phases(get_spec(cfg.schedule), cfg, get_spec)


def build_schedule(cfg: ScheduleConfig, *, check: bool = True) -> Schedule:
    """Build, fold, lower, validate and version-annotate the schedule ``cfg`` describes."""
    if not isinstance(cfg, ScheduleConfig):
        raise ScheduleError(f"schedule: expected a ScheduleConfig, got {type(cfg).__name__}")
    cfg = resolve(cfg)
    spec = get_spec(cfg.schedule)
    S = cfg.stages
    N = cfg.batches or 0
    phases = plan_phases(spec, cfg, get_spec)
    n_lists = cfg.workers if spec.data_parallel else S
    lists = join_phases(phases, cfg, n_lists, get_spec)
    placement = [[r] * S for r in range(cfg.workers)] if spec.data_parallel else [list(range(S))]
    params: dict[str, int] = {}
    warm = min(cfg.warmup, N) if spec.warmup_with is not None else 0
    if warm:
        params["warmup"] = warm
    if spec.switches:
        params["switch"] = max(warm, min(cfg.switch if cfg.switch is not None else N // 2, N))
    sched = Schedule(
        name=spec.name,
        stages=S,
        batches=N,
        microbatches=cfg.microbatches if spec.uses_micro else 1,
        workers=cfg.workers if spec.data_parallel else 1,
        policy=spec.policy,
        device_actions=lists,
        placement=placement,
        uses_micro=spec.uses_micro,
        local_loss=spec.local_loss,
        data_parallel=spec.data_parallel,
        has_steady_state=spec.has_steady_state,
        phases=tuple(phases),
        params=params,
        config=cfg,
    )
    if not spec.data_parallel and cfg.fold is not None and cfg.fold < S:
        sched = fold(sched, cfg.fold)
    sched = lower(sched)
    if check:
        validate(sched)
    return annotate(sched)
