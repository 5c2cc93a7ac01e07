"""Register-pipeline schedules: stale (PPL-SGD), hybrid, local.

All three are cycle-driven (stage s works on batch t in cycle t + s) and are
built from :func:`stalesim.schedule.orders.register_pipeline`.
"""

from __future__ import annotations

from stalesim.schedule.actions import Action
from stalesim.schedule.ir import Policy, ScheduleConfig
from stalesim.schedule.orders import register_pipeline, sequential_batch

PerStage = list[list[Action]]


def stale(cfg: ScheduleConfig) -> tuple[PerStage, Policy, dict]:
    """Pipelined backpropagation with stale weights (Zhang & Abdelrahman).

    Forward of stage s reads weights 2(S-1-s) updates old; the backward reads
    the current weights (policy ``latest``), so the two differ.
    """
    return register_pipeline(cfg.stages, range(cfg.batches)), Policy.LATEST, {}


def hybrid(cfg: ScheduleConfig) -> tuple[PerStage, Policy, dict]:
    """``stale`` for the first ``switch`` batches, drain, then ``sequential``.

    The default switch point is half of the batches.
    """
    switch = cfg.switch if cfg.switch is not None else cfg.batches // 2
    per_stage = register_pipeline(cfg.stages, range(switch))
    for t in range(switch, cfg.batches):
        for s, acts in enumerate(sequential_batch(cfg.stages, t)):
            per_stage[s].extend(acts)
    return per_stage, Policy.LATEST, {"switch": switch}


def local(cfg: ScheduleConfig) -> tuple[PerStage, Policy, dict]:
    """Local updates: each stage trains on its own auxiliary head.

    Activations flow forward (detached); no gradient crosses a stage, so the
    weights are never stale, but a stage's input features drift as the stages
    before it learn.
    """
    return register_pipeline(cfg.stages, range(cfg.batches), local_loss=True), Policy.LATEST, {}
