"""RunState and Handoff: what a checkpoint of an emulation carries besides the runtimes.

Its own module so that the replay and the checkpoint code share it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class RunState:
    """Progress that a checkpoint must carry besides the runtimes."""

    index: int = 0  # next step of the replay
    losses: dict[int, float] = field(default_factory=dict)  # batch -> mini-batch loss
    loss_parts: dict[int, float] = field(default_factory=dict)
    loss_count: dict[int, int] = field(default_factory=dict)
    correct: dict[int, int] = field(default_factory=dict)  # epoch -> correct train predictions
    seen: dict[int, int] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    diverged_at: int | None = None
    ar_issued: dict[tuple[int, int], int] = field(default_factory=dict)


@dataclass
class Handoff:
    """What moves between the replay's actions and a checkpoint carries: stage outputs
    awaiting the next stage's F, input gradients awaiting the previous stage's backward,
    both keyed by the consumer's (worker, stage, batch, micro), and per batch the
    LOSS actions still to read its data (the batch is dropped after the last)."""

    acts: dict[tuple, torch.Tensor] = field(default_factory=dict)
    grads: dict[tuple, torch.Tensor] = field(default_factory=dict)
    batch_left: dict[int, int] = field(default_factory=dict)
