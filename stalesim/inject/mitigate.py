"""The staleness mitigations a user's own optimizer can take: learning-rate factors and update terms.

The factor of stage s for the update fed by batch t comes from the emulator's own
:meth:`stalesim.runtime.mitigations.Mitigations.lr_factor` (staleness-aware lr,
eta / (D_F + 1); PipeMare's eta * max(D_F, 1)^(-p)), built from the same schedule, so the
delays are the version table's. The user's optimizer applies it: during its step each
param group's lr is its own lr (as the user's scheduler left it) times the factor of the
group's stage, and is put back after the step, so schedulers and ``state_dict`` never see
the scaled value. A stage's factor needs the stage's parameters in groups of their own
(:meth:`stalesim.inject.StalePipeline.param_groups`); a group that spans two stages is
refused in one line.

Spike compensation (Kosson et al.: lr times a = mu^D, plus -lr b (g + wd w) after the
step) and error feedback (w += beta (Delta_t - Delta_{t-1}) after a delayed step) act on
the weights around the step, through the emulator's own
:class:`~stalesim.runtime.optim.StepCorrections` and ``Mitigations.spike_coefficients``
(:class:`StageUpdate`). Spike compensation corrects heavy-ball SGD momentum, so it needs a
``torch.optim.SGD`` with momentum and without Nesterov, one group per stage.

Weight prediction and PipeMare's discrepancy correction change the weights a pass reads
(:mod:`stalesim.inject.predict`, :mod:`stalesim.inject.correct`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.runtime.optim import StepCorrections
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
        self._group_stage = _stage_groups(optimizer, stage_of, "a per-stage learning-rate mitigation")

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


def _stage_groups(optimizer: torch.optim.Optimizer, stage_of: dict[int, int], what: str) -> list[int]:
    """The stage of each param group; one line naming the group that spans two stages."""
    out = []
    for g, group in enumerate(optimizer.param_groups):
        stages = sorted({stage_of[id(p)] for p in group["params"]})
        if len(stages) != 1:
            raise StalesimError(f"optimizer: param group {g} holds parameters of stages {stages}; {what} needs "
                                f"one group per stage (pipe.param_groups())")
        out.append(stages[0])
    return out


class StageUpdate:
    """Per stage: spike compensation and error feedback around the user's optimizer step
    (module doc), with the emulator's coefficients and update terms."""

    def __init__(self, sched: Schedule, params: Sequence[Sequence[torch.nn.Parameter]], *,
                 spike_compensation: bool = False, error_feedback: bool = False,
                 error_feedback_beta: float = 1.0) -> None:
        if isinstance(error_feedback_beta, bool) or not isinstance(error_feedback_beta, (int, float)) \
                or not math.isfinite(error_feedback_beta) or error_feedback_beta <= 0:
            raise StalesimError(f"error_feedback_beta: expected a finite number > 0, got {error_feedback_beta!r}")
        self.sched = sched
        self.spike = bool(spike_compensation)
        self.active = self.spike or bool(error_feedback)
        self.params = [list(ps) for ps in params]
        self.terms = [StepCorrections(ps, error_feedback=bool(error_feedback), beta=float(error_feedback_beta))
                      for ps in self.params]
        # the delays of each stage's updates (momentum is the optimizer's, set in bind)
        self.mits = [Mitigations(TrainConfig(error_feedback=bool(error_feedback)), sched, s)
                     for s in range(len(self.params))]
        self.error_feedback = bool(error_feedback)
        self._group_stage: list[int] = []
        self._step: list[tuple[float, float, float]] = []  # per group: (lr before a, a, b)

    def bind(self, optimizer: torch.optim.Optimizer, stage_of: dict[int, int]) -> None:
        """Check the optimizer can take spike compensation and learn each group's stage."""
        if not self.spike:
            return
        if type(optimizer) is not torch.optim.SGD:
            raise StalesimError(f"optimizer: spike_compensation corrects heavy-ball SGD momentum; got "
                                f"{type(optimizer).__name__}")
        self._group_stage = _stage_groups(optimizer, stage_of, "spike_compensation")
        for g, (group, s) in enumerate(zip(optimizer.param_groups, self._group_stage)):
            mu = float(group.get("momentum", 0.0))
            if not mu > 0 or group.get("nesterov") or group.get("dampening", 0):
                raise StalesimError(f"optimizer: param group {g}: spike_compensation needs SGD momentum > 0 "
                                    f"without Nesterov or dampening (momentum={mu}, nesterov="
                                    f"{group.get('nesterov')}, dampening={group.get('dampening')})")
            self.mits[s] = Mitigations(TrainConfig(spike_compensation=True, momentum=mu, optimizer="sgd",
                                                   error_feedback=self.error_feedback), self.sched, s)

    def before(self, optimizer: torch.optim.Optimizer, batch: int) -> None:
        """Before the step of ``batch`` (after the lr factors): record the terms, lr times a."""
        if not self.active:
            return
        if not self.spike:
            for ps, terms in zip(self.params, self.terms):
                terms.before([_grad(p) for p in ps], 0.0, 0.0)
            return
        self._step = []
        for group, s in zip(optimizer.param_groups, self._group_stage):
            a, b = self.mits[s].spike_coefficients(batch)
            self._step.append((group["lr"], a, b))
            self.terms[s].before([_grad(p) for p in self.params[s]], b, float(group.get("weight_decay", 0.0)))
            group["lr"] = group["lr"] * a

    def after(self, optimizer: torch.optim.Optimizer, batch: int) -> None:
        """After the step of ``batch``: the lr before a back, then each stage's update terms."""
        if not self.active:
            return
        lrs = [0.0] * len(self.params)
        bs = [0.0] * len(self.params)
        for group, s, (lr, _, b) in zip(optimizer.param_groups, self._group_stage, self._step):
            group["lr"] = lr
            lrs[s], bs[s] = lr, b
        for s, terms in enumerate(self.terms):
            terms.after(lrs[s], bs[s], self.error_feedback and self.mits[s].batch_delay(batch) >= 1)
        self._step = []

    def state_dict(self) -> list[list[torch.Tensor] | None]:
        return [None if t.prev_step is None else [d.clone() for d in t.prev_step] for t in self.terms]

    def load_state_dict(self, state: Sequence[Sequence[torch.Tensor] | None]) -> None:
        for terms, prev in zip(self.terms, state):
            terms.prev_step = None if prev is None else list(prev)


def _grad(p: torch.nn.Parameter) -> torch.Tensor:
    """The gradient the step uses; a parameter without one steps with zeros (the emulator's buffer)."""
    return p.grad if p.grad is not None else torch.zeros_like(p)
