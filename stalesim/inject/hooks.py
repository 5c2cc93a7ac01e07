"""The pipeline's hooks under ``torch.compile``: run as plain Python, never traced.

Dynamo inlines module hooks and saved-tensor hooks into the frames it compiles. Ours read
storage addresses, autograd's graph task and Python dicts keyed by them, which Dynamo can
neither trace nor guard on: traced, each hook broke the graph and recompiled on every new
address until Dynamo's recompile limit sent the whole frame back to eager. Disabled, each
hook is one clean graph break and the model's own layers between them compile once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

_Hook = TypeVar("_Hook", bound=Callable[..., object])


def eager(hook: _Hook) -> _Hook:
    """``hook`` run eagerly inside a compiled region (``torch.compiler.disable``)."""
    return torch.compiler.disable(hook)
