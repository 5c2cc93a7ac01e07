"""Register-pipeline schedules: stale (PPL-SGD) and local updates.

Both are cycle-driven (stage s works on batch t in cycle t + s) and are built
from :func:`stalesim.schedule.orders.register_pipeline`. ``hybrid`` is ``stale``
followed by ``sequential`` (a phase switch, :mod:`stalesim.schedule.transforms`).
"""

from __future__ import annotations

from stalesim.schedule.actions import Action
from stalesim.schedule.ir import ScheduleConfig
from stalesim.schedule.orders import register_pipeline

PerStage = list[list[Action]]


def stale(cfg: ScheduleConfig) -> PerStage:
    """Pipelined backpropagation with stale weights (Zhang & Abdelrahman).

    Forward of stage s reads weights 2(S-1-s) updates old; the backward reads
    the current weights (policy ``latest``), so the two differ.
    """
    return register_pipeline(cfg.stages, range(cfg.batches or 0))


def local(cfg: ScheduleConfig) -> PerStage:
    """Local updates: each stage trains on its own auxiliary head.

    Activations flow forward (detached); no gradient crosses a stage, so the
    weights are never stale, but a stage's input features drift as the stages
    before it learn.
    """
    return register_pipeline(cfg.stages, range(cfg.batches or 0), local_loss=True)
