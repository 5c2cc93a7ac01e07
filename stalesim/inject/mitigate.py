"""The staleness mitigations a user's own optimizer can take: the learning-rate factors.

The factor of stage s for the update fed by batch t comes from the emulator's own
:meth:`stalesim.runtime.mitigations.Mitigations.lr_factor` (staleness-aware lr,
eta / (D_F + 1); PipeMare's eta * max(D_F, 1)^(-p)), built from the same schedule, so the
delays are the version table's. The user's optimizer applies it: during its step each
param group's lr is its own lr (as the user's scheduler left it) times the factor of the
group's stage, and is put back after the step, so schedulers and ``state_dict`` never see
the scaled value. A stage's factor needs the stage's parameters in groups of their own
(:meth:`stalesim.inject.StalePipeline.param_groups`); a group that spans two stages is
refused in one line.

The mitigations that change the weights a pass reads (weight prediction, PipeMare's
discrepancy correction) or the update itself (spike compensation, error feedback) read the
optimizer's state at the time of the pipeline's forward, which a user's loop has already
advanced (a real pipeline's forward of batch t ran before the updates the loop has
already applied); a loop cannot ask for them (:class:`~stalesim.inject.StalePipeline`
takes no such flag) rather than get an approximation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.schedule import Schedule


class StageLR:
    """Per stage, the lr factor of each update; :meth:`scale` / :meth:`restore` around a step."""

    def __init__(self, sched: Schedule, *, staleness_lr: bool = False, pipemare_lr: bool = False,
                 pipemare_warmup: int = 0) -> None:
        cfg = TrainConfig(staleness_lr=staleness_lr, pipemare_lr=pipemare_lr, pipemare_warmup=pipemare_warmup)
        self.active = bool(staleness_lr or pipemare_lr)
        self.mits = [Mitigations(cfg, sched, s) for s in range(sched.stages)]
        self._group_stage: list[int] = []
        self._base: list[float] = []

    def bind(self, optimizer: torch.optim.Optimizer, stage_of: dict[int, int]) -> None:
        """Which stage each param group holds (``stage_of``: id(param) -> stage)."""
        if not self.active:
            return
        out = []
        for g, group in enumerate(optimizer.param_groups):
            stages = sorted({stage_of[id(p)] for p in group["params"]})
            if len(stages) != 1:
                raise StalesimError(f"optimizer: param group {g} holds parameters of stages {stages}; a per-stage "
                                    f"learning-rate mitigation needs one group per stage (pipe.param_groups())")
            out.append(stages[0])
        self._group_stage = out

    def scale(self, optimizer: torch.optim.Optimizer, batch: int) -> None:
        """Before the step of ``batch``: each group's lr times its stage's factor."""
        if not self.active:
            return
        groups: Sequence[dict] = optimizer.param_groups
        self._base = [g["lr"] for g in groups]
        for g, s in zip(groups, self._group_stage):
            g["lr"] = g["lr"] * self.mits[s].lr_factor(batch)

    def restore(self, optimizer: torch.optim.Optimizer) -> None:
        """After the step: the lrs the user's loop set."""
        for g, lr in zip(optimizer.param_groups, self._base):
            g["lr"] = lr
        self._base = []
