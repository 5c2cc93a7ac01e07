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
from stalesim.schedule.actions import Kind
from stalesim.schedule.checks import validate
from stalesim.schedule.generators import data_parallel, pipelined, register, virtual, zero_bubble
from stalesim.schedule.ir import Phase, Policy, Schedule, ScheduleConfig
from stalesim.schedule.lowering import lower
from stalesim.schedule.placement import stage_devices
from stalesim.schedule.spec import ScheduleSpec
from stalesim.schedule.transforms import fold, join_phases, plan_phases
from stalesim.schedule.versions import annotate


def _whole_rounds(cfg: ScheduleConfig) -> str | None:
    """Without a flush, an interleaved order only keeps a batch's updates in order when
    each batch fills whole rounds of R micro-batches (Megatron's M % R == 0)."""
    V = cfg.stages_per_device or 1
    R = cfg.stages // V
    if V > 1 and cfg.microbatches % R:
        return (f"microbatches: {cfg.schedule} with {V} stages per device needs a multiple of "
                f"the devices ({R}) (got microbatches={cfg.microbatches})")
    return None


def _two_bw_interleaved(cfg: ScheduleConfig) -> str | None:
    """2BW's update of batch t goes before the first forward of batch t + 2, so batch t's
    backwards must all come before it: M >= 2(R - 1) with the interleaved warm-up."""
    R = cfg.stages // (cfg.stages_per_device or 1)
    if cfg.microbatches < 2 * (R - 1):
        return (f"microbatches: {cfg.schedule} needs microbatches >= 2 (devices - 1) = {2 * (R - 1)} "
                f"(got microbatches={cfg.microbatches}, devices={R})")
    return _whole_rounds(cfg)


def _specs() -> dict[str, ScheduleSpec]:
    def flush(S: int, M: int) -> int:
        return 8

    zb = "Qi et al., Zero Bubble (Almost) Pipeline Parallelism (ICLR 2024)"

    specs = [
        ScheduleSpec("sequential", pipelined.sequential, "one batch at a time, no overlap (baseline)",
                     "baseline", fast_path="critical-path", sim_batches=flush),
        ScheduleSpec("gpipe", pipelined.gpipe, "GPipe: M micro-batches, all F then all B, flush",
                     "Huang et al., GPipe (NeurIPS 2019)", uses_micro=True, fast_path="fill-drain",
                     sim_batches=flush, torch_name="ScheduleGPipe"),
        ScheduleSpec("1f1b", pipelined.one_f_one_b_flush,
                     "PipeDream-flush: 1F1B over M micro-batches, flush",
                     "Narayanan et al., PipeDream-2BW/flush (ICML 2021)", uses_micro=True,
                     fast_path="one-f-one-b", sim_batches=flush, torch_name="Schedule1F1B"),
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
        ScheduleSpec("interleaved-1f1b", virtual.interleaved_1f1b,
                     "Megatron interleaved 1F1B: V chunks per device (s on s mod R), flush",
                     "Narayanan et al., Efficient Large-Scale Language Model Training on GPU "
                     "Clusters Using Megatron-LM (SC 2021)", uses_micro=True, fast_path="flush",
                     sim_batches=flush, placement="loop", stages_per_device=2,
                     fixed_stages_per_device=False, torch_name="ScheduleInterleaved1F1B"),
        ScheduleSpec("looped-bfs", virtual.looped_bfs,
                     "breadth-first looping: all F chunk by chunk, then all B in reverse, flush",
                     "Lamy-Poirier, Breadth-First Pipeline Parallelism (MLSys 2023)", uses_micro=True,
                     fast_path="flush", sim_batches=flush, placement="loop", stages_per_device=2,
                     fixed_stages_per_device=False, torch_name="ScheduleLoopedBFS"),
        ScheduleSpec("zb-h1", zero_bubble.zb_h1,
                     "ZB-H1: 1F1B with split backward, W delayed s steps (1F1B's peak memory)",
                     zb, uses_micro=True, fast_path="flush", sim_batches=flush, placement="loop",
                     fixed_stages_per_device=False, splits_backward=True,
                     torch_name="ScheduleInterleavedZeroBubble"),
        ScheduleSpec("zb-h2", zero_bubble.zb_h2,
                     "ZB-H2: split backward, up to 2S-1 in flight, W fill every gap (zero bubble)",
                     zb, uses_micro=True, fast_path="flush", sim_batches=flush, splits_backward=True),
        ScheduleSpec("zb-v", zero_bubble.zb_v,
                     "ZB-V: two chunks per device in a V shape, split backward (zero bubble)",
                     zb + ", section 6", uses_micro=True, fast_path="flush", sim_batches=flush,
                     placement="v", stages_per_device=2, splits_backward=True,
                     torch_name="ScheduleZBVZeroBubble"),
        ScheduleSpec("dualpipev", zero_bubble.dualpipev,
                     "DualPipeV: V shape, overlapped F/B pairs, split backward at the ends",
                     "DeepSeek-AI, DeepSeek-V3 Technical Report (2024), DualPipe; DualPipeV "
                     "(deepseek-ai/DualPipe)", uses_micro=True, fast_path="flush", sim_batches=flush,
                     placement="v", stages_per_device=2, splits_backward=True,
                     min_microbatches=lambda S: S, min_micro_rule="stages",
                     torch_name="ScheduleDualPipeV"),
        ScheduleSpec("interleaved-pipedream", virtual.interleaved_pipedream,
                     "async interleaved 1F1B, no flush, update per batch, weight stashing",
                     "PipeDream weight stashing (Narayanan et al., SOSP 2019) on Megatron's "
                     "interleaved order", policy=Policy.STASH, uses_micro=True, staleness_free=False,
                     warmup_with="interleaved-1f1b", placement="loop", stages_per_device=2,
                     fixed_stages_per_device=False, constraint=_whole_rounds),
        ScheduleSpec("interleaved-2bw", virtual.interleaved_2bw,
                     "async interleaved 1F1B, no flush, 2BW update placement (double buffer)",
                     "PipeDream-2BW (Narayanan et al., ICML 2021) on Megatron's interleaved order",
                     policy=Policy.DOUBLE_BUFFER, uses_micro=True, staleness_free=False,
                     warmup_with="interleaved-1f1b", placement="loop", stages_per_device=2,
                     fixed_stages_per_device=False, min_microbatches=lambda S: 1,
                     constraint=_two_bw_interleaved),
    ]
    return {s.name: s for s in specs}


SCHEDULES: dict[str, ScheduleSpec] = _specs()


def schedule_names() -> list[str]:
    """Every registered schedule's name, in registration order."""
    return list(SCHEDULES)


def get_spec(name: str) -> ScheduleSpec:
    """The registered :class:`ScheduleSpec` of ``name`` (a one-line ScheduleError listing the
    known names otherwise)."""
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
    if cfg.stages_per_device is None:
        cfg = replace(cfg, stages_per_device=spec.stages_per_device)
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
    V = cfg.stages_per_device or 1
    phases = plan_phases(spec, cfg, get_spec)
    n_lists = spec.devices(cfg)
    lists = join_phases(phases, cfg, n_lists, get_spec)
    placement = ([[r] * S for r in range(cfg.workers)] if spec.data_parallel
                 else [stage_devices(spec.placement, S, V)])
    split = frozenset((a.worker, a.stage, a.batch, a.micro)
                      for acts in lists for a in acts if a.kind is Kind.I)
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
        stages_per_device=V,
        split_keys=split,
    )
    if not spec.data_parallel and cfg.fold is not None and cfg.fold < n_lists:
        sched = fold(sched, cfg.fold)
    sched = lower(sched)
    if check:
        validate(sched)
    return annotate(sched)
