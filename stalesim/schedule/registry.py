"""Schedule registry and the one entry point, :func:`build_schedule`.

``build_schedule`` = generate (per-stage or per-worker compute lists) -> place
(optionally fold S stages onto fewer devices) -> lower (sends/receives) ->
validate (exactly once, paired, deadlock-free) -> annotate versions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stalesim.errors import ScheduleError
from stalesim.schedule import cyclic, dataparallel, pipeline
from stalesim.schedule.actions import Action
from stalesim.schedule.dryrun import dry_run
from stalesim.schedule.ir import Policy, Schedule, ScheduleConfig
from stalesim.schedule.lowering import lower
from stalesim.schedule.validate import validate
from stalesim.schedule.versions import annotate

Generator = Callable[[ScheduleConfig], tuple[list[list[Action]], Policy, dict]]


@dataclass(frozen=True)
class ScheduleSpec:
    generator: Generator
    summary: str
    uses_micro: bool = False
    data_parallel: bool = False
    local_loss: bool = False


SCHEDULES: dict[str, ScheduleSpec] = {
    "sequential": ScheduleSpec(pipeline.sequential, "one batch at a time, no overlap (baseline)"),
    "gpipe": ScheduleSpec(pipeline.gpipe, "GPipe: M micro-batches, all F then all B, flush", True),
    "1f1b": ScheduleSpec(pipeline.one_f_one_b_flush, "PipeDream-flush: 1F1B over M micro-batches, flush", True),
    "pipedream": ScheduleSpec(pipeline.pipedream, "PipeDream: async 1F1B, weight stashing"),
    "2bw": ScheduleSpec(pipeline.two_bw, "PipeDream-2BW: async 1F1B, double-buffered weights", True),
    "stale": ScheduleSpec(cyclic.stale, "stale-weights register pipeline (PPL-SGD)"),
    "hybrid": ScheduleSpec(cyclic.hybrid, "stale pipeline, then drain and continue sequential"),
    "local": ScheduleSpec(cyclic.local, "local updates: per-stage auxiliary heads", local_loss=True),
    "dp": ScheduleSpec(dataparallel.dp, "synchronous data parallelism, ring all-reduce", data_parallel=True),
    "pipe-sgd": ScheduleSpec(dataparallel.pipe_sgd, "Pipe-SGD: all-reduce of step t overlaps step t+1", data_parallel=True),
}


def schedule_names() -> list[str]:
    return list(SCHEDULES)


def get_spec(name: str) -> ScheduleSpec:
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ScheduleError(
            f"unknown schedule {name!r} (known: {', '.join(SCHEDULES)})"
        ) from None


def build_schedule(name: str, cfg: ScheduleConfig | None = None, *, check: bool = True) -> Schedule:
    """Build, lower, validate and version-annotate the schedule ``name``."""
    cfg = cfg or ScheduleConfig()
    cfg.check()
    spec = get_spec(name)
    if spec.data_parallel and cfg.devices not in (None, cfg.stages):
        raise ScheduleError(f"{name} places each worker on its own device; do not pass devices")
    lists, policy, params = spec.generator(cfg)
    S = cfg.stages
    if spec.data_parallel:
        workers = cfg.workers
        placement = [[r] * S for r in range(workers)]
    else:
        workers = 1
        placement = [list(range(S))]
    sched = Schedule(
        name=name,
        stages=S,
        batches=cfg.batches,
        microbatches=cfg.microbatches if spec.uses_micro else 1,
        workers=workers,
        policy=policy,
        device_actions=lists,
        placement=placement,
        uses_micro=spec.uses_micro,
        local_loss=spec.local_loss,
        params=params,
    )
    if not spec.data_parallel and cfg.devices is not None and cfg.devices < S:
        sched = fold(sched, cfg.devices)
    sched = lower(sched)
    if check:
        validate(sched)
    return annotate(sched)


def fold(sched: Schedule, devices: int) -> Schedule:
    """Place S stages contiguously on fewer devices.

    The stages of one device are merged in the order of the one-stage-per-device
    dry run, which is a topological order of their dependencies, so the folded
    schedule cannot deadlock. ``devices=1`` gives the single-device baseline.
    """
    S = sched.stages
    stage_dev = [s * devices // S for s in range(S)]
    merged: list[list[Action]] = [[] for _ in range(devices)]
    for step in dry_run(sched):
        merged[stage_dev[step.action.stage]].append(step.action)
    return Schedule(
        name=sched.name, stages=S, batches=sched.batches, microbatches=sched.microbatches,
        workers=1, policy=sched.policy, device_actions=merged, placement=[stage_dev],
        uses_micro=sched.uses_micro, local_loss=sched.local_loss, params=dict(sched.params),
    )
