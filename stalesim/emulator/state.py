"""RunState: the progress of an emulation that a checkpoint carries besides the runtimes.

Its own module so that the replay and the checkpoint code share it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
