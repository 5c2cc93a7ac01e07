"""Where data lives and how per-batch seeds are mixed: shared by the image datasets
(:mod:`stalesim.runtime.data`) and the text stream (:mod:`stalesim.runtime.text`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig


def cache_dir() -> Path:
    return Path(os.environ.get("STALESIM_CACHE") or Path.home() / ".cache" / "stalesim")


def data_root(cfg: TrainConfig) -> Path | None:
    root = cfg.data_dir or os.environ.get("STALESIM_DATA")
    return Path(root).expanduser() if root else None


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing; stable across platforms)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)
