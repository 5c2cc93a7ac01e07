"""The training schedule of a run, built once through the IR for emulator and executor.

:func:`build_train_schedule` maps a :class:`TrainConfig` onto
:func:`stalesim.schedule.build_schedule`, and adds the **synchronous warm-up**
mitigation as IR too: the first K batches run one at a time (``sequential``, or a
GPipe flush per batch for micro-batch schedules, both staleness 0), then the
schedule proper continues from batch K: the hybrid switch in reverse. The
result is lowered, validated and version-annotated like any generated
schedule, so every consumer sees the same version table.
"""

from __future__ import annotations

from dataclasses import replace

from stalesim.runtime.config import TrainConfig
from stalesim.schedule import Action, Kind, Schedule, ScheduleConfig, build_schedule, get_spec
from stalesim.schedule.lowering import lower
from stalesim.schedule.orders import forward, sequential_batch
from stalesim.schedule.registry import fold
from stalesim.schedule.validate import validate
from stalesim.schedule.versions import annotate


def schedule_config(cfg: TrainConfig, batches: int, batches_per_epoch: int | None = None) -> ScheduleConfig:
    """The ScheduleConfig for ``batches`` mini-batches of this run."""
    switch = cfg.switch
    if cfg.switch_epoch is not None:
        switch = cfg.switch_epoch * (batches_per_epoch or 0)
    if switch is not None:
        switch = min(switch, batches)
    return ScheduleConfig(
        stages=cfg.num_stages,
        batches=batches,
        microbatches=cfg.microbatches,
        workers=cfg.workers,
        switch=switch,
        warmup=min(cfg.warmup, batches) if cfg.schedule == "pipe-sgd" else 0,
    )


def build_train_schedule(cfg: TrainConfig, batches: int, batches_per_epoch: int | None = None) -> Schedule:
    """Build the (whole-run) schedule; warm-up for non-pipe-sgd schedules is prepended."""
    scfg = schedule_config(cfg, batches, batches_per_epoch)
    K = min(cfg.warmup, batches)
    if cfg.schedule == "pipe-sgd" or K == 0:
        return build_schedule(cfg.schedule, scfg)
    return with_sync_warmup(cfg.schedule, scfg, K)


def _shift(a: Action, k: int) -> Action:
    return replace(a, batch=a.batch + k)


def with_sync_warmup(name: str, scfg: ScheduleConfig, k: int) -> Schedule:
    """Schedule ``name`` whose first ``k`` batches run synchronously, one at a time."""
    spec = get_spec(name)
    S, N = scfg.stages, scfg.batches
    if k >= N:
        rest: list[list[Action]] = []
        policy = None
        params: dict = {}
    else:
        rest_cfg = replace(scfg, batches=N - k, switch=None if scfg.switch is None else max(0, scfg.switch - k))
        rest, policy, params = spec.generator(rest_cfg)
        rest = [[_shift(a, k) for a in acts] for acts in rest]
    if policy is None:
        _, policy, params = spec.generator(replace(scfg, batches=1, switch=None))
    P = scfg.workers if spec.data_parallel else 1
    n_lists = P if spec.data_parallel else S
    lists: list[list[Action]] = [[] for _ in range(n_lists)]
    for t in range(k):
        if spec.data_parallel:
            for r in range(P):
                for s in range(S):
                    lists[r].extend(forward(s, t, None, s == S - 1, r))
                for s in reversed(range(S)):
                    lists[r].append(Action(Kind.B, s, t, None, r))
                    if P > 1:
                        lists[r].append(Action(Kind.AR, s, t, None, r))
                for s in reversed(range(S)):
                    if P > 1:
                        lists[r].append(Action(Kind.ARW, s, t, None, r))
                    lists[r].append(Action(Kind.U, s, t, None, r))
        elif spec.uses_micro:
            M = scfg.microbatches
            for s in range(S):
                for m in range(M):
                    lists[s].extend(forward(s, t, m, s == S - 1))
                for m in range(M):
                    lists[s].append(Action(Kind.B, s, t, m))
                lists[s].append(Action(Kind.U, s, t))
        else:
            for s, acts in enumerate(sequential_batch(S, t)):
                if spec.local_loss and s < S - 1:
                    acts = [acts[0], Action(Kind.LOSS, s, t), *acts[1:]]
                lists[s].extend(acts)
    for i, acts in enumerate(rest):
        lists[i].extend(acts)
    placement = [[r] * S for r in range(P)] if spec.data_parallel else [list(range(S))]
    sched = Schedule(
        name=name, stages=S, batches=N, microbatches=scfg.microbatches if spec.uses_micro else 1,
        workers=P, policy=policy, device_actions=lists, placement=placement,
        uses_micro=spec.uses_micro, local_loss=spec.local_loss,
        params={**params, "sync_warmup": k},
    )
    if not spec.data_parallel and scfg.devices is not None and scfg.devices < S:
        sched = fold(sched, scfg.devices)
    sched = lower(sched)
    validate(sched)
    return annotate(sched)
