"""Exact pipeline staleness inside a user's own PyTorch training loop (docs/inject.md)."""

from stalesim.inject.pipeline import StalePipeline
from stalesim.inject.stages import StageSplit, even_split, named_split

__all__ = ["StalePipeline", "StageSplit", "even_split", "named_split"]
