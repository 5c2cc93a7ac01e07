"""RunState, BatchedRunState and Handoff: what a checkpoint of an emulation carries besides the runtimes.

Its own module so that the replay and the checkpoint code share it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

#: What one batch's loss is: a float, or one float per run in a batched emulation.
LossT = TypeVar("LossT")
#: What one epoch's count of predictions is: an int, or one int per run when batched.
CountT = TypeVar("CountT")


@dataclass
class RunState(Generic[LossT, CountT]):
    """Progress that a checkpoint must carry besides the runtimes. Generic in the value of one
    batch's loss and one epoch's counts, so that the batched emulation's per-run lists
    (:class:`BatchedRunState`) are typed as lists."""

    index: int = 0  # next step of the replay
    losses: dict[int, LossT] = field(default_factory=dict)  # batch -> mini-batch loss
    loss_parts: dict[int, LossT] = field(default_factory=dict)
    loss_count: dict[int, int] = field(default_factory=dict)
    correct: dict[int, CountT] = field(default_factory=dict)  # epoch -> correct train predictions
    seen: dict[int, CountT] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    diverged_at: int | None = None
    ar_issued: dict[tuple[int, int], int] = field(default_factory=dict)

    def restore(self, fields: dict[str, Any]) -> None:
        """Take a checkpoint's fields, in place: the replay's collaborators hold this object.
        The constructor checks the names (an unknown or missing one is a TypeError)."""
        vars(self).update(vars(type(self)(**fields)))


@dataclass
class BatchedRunState(RunState[list[float], list[int]]):
    """RunState with per-run lists: ``losses[t]``, ``loss_parts[t]``, ``correct[epoch]`` and
    ``seen[epoch]`` hold one entry per run; ``diverged_at`` is set when every run diverged."""

    runs: int = 1
    run_metrics: list[list[dict[str, Any]]] = field(default_factory=list)
    run_epochs: list[list[dict[str, Any]]] = field(default_factory=list)
    run_diverged_at: list[int | None] = field(default_factory=list)

    @classmethod
    def fresh(cls, runs: int) -> BatchedRunState:
        return cls(runs=runs, run_metrics=[[] for _ in range(runs)], run_epochs=[[] for _ in range(runs)],
                   run_diverged_at=[None] * runs)


@dataclass
class Handoff:
    """What moves between the replay's actions and a checkpoint carries: stage outputs
    awaiting the next stage's F, input gradients awaiting the previous stage's backward,
    both keyed by the consumer's (worker, stage, batch, micro), and per batch the
    LOSS actions still to read its data (the batch is dropped after the last)."""

    acts: dict[tuple, torch.Tensor] = field(default_factory=dict)
    grads: dict[tuple, torch.Tensor] = field(default_factory=dict)
    batch_left: dict[int, int] = field(default_factory=dict)

    def restore(self, acts: dict[tuple, torch.Tensor], grads: dict[tuple, torch.Tensor],
                batch_left: dict[int, int]) -> None:
        """Take a checkpoint's queues, in place (the batch feed holds this object)."""
        self.acts, self.grads, self.batch_left = acts, grads, batch_left
