"""What a :class:`~stalesim.runtime.stage.StageRuntime` keeps between actions: one record per
in-flight forward, and the per-batch weight-gradient buffers.

A record is created by ``F``, extended by ``LOSS`` (and, on a split stage, by ``I``) and
consumed by ``B`` or ``W``; a checkpoint stores what rebuilds it. Kept apart from the runtime
because both the backward kinds and the checkpoint read it, and the memory sampler reads
its storages (:mod:`stalesim.runtime.memory`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from stalesim.schedule import Action


@dataclass
class Inflight:
    """A forward whose backward has not run yet."""

    x: torch.Tensor  # stage input (requires_grad for s > 0)
    y: torch.Tensor  # stage output (graph attached)
    leaves: list[torch.Tensor]  # tensors the forward read as weights (params or predicted)
    v_f: int
    predicted: bool = False
    loss: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # memory accounting (stalesim.runtime.memory): storage key -> bytes of the input, the
    # output and every non-parameter tensor autograd saved (negative keys: counted bytes
    # of a hook-free forward, from the first forward of that shape)
    storages: dict[int, int] = field(default_factory=dict)
    hooked: bool = True  # ran under the version hooks (a backward may read another version)
    # split backward: the outputs of the stage's parameter-owning modules (module index,
    # output) kept by the forward hooks; after I, the gradient at each of them
    segments: list[tuple[int, torch.Tensor]] | None = None
    seg_grads: list[torch.Tensor | None] | None = None
    v_b: int | None = None
    w_base: list[torch.Tensor] | None = None  # backward weights a mitigation made at I

    def backward_start(self, grad_y: torch.Tensor | None, action: Action, kind: str
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(outputs, their gradient) a backward (``kind``: B or I) of ``action`` starts from:
        the loss on a loss stage (``grad_y`` None), else the stage output and ``grad_y``."""
        if grad_y is None:
            if self.loss is None:
                raise RuntimeError(f"stalesim: {action} has no loss (LOSS must run before {kind})")
            return self.loss, None
        return self.y, grad_y

    def checkpoint_entry(self, weights_of: Callable[[int], list[torch.Tensor]]) -> dict[str, Any]:
        """What rebuilds this forward on resume: its input, the weights it read (version
        v_F from ``weights_of`` unless predicted), whether LOSS ran, and, when its ``I`` ran,
        what its ``W`` reads."""
        entry: dict[str, Any] = {
            "x": self.x.detach(),
            "x_requires_grad": self.x.requires_grad,
            "v_f": self.v_f,
            "weights": [w.detach() for w in self.leaves] if self.predicted else weights_of(self.v_f),
            "has_loss": self.loss is not None,
        }
        if self.seg_grads is not None:  # I ran, W pending (split backward)
            entry["seg_grads"] = [None if g is None else g.detach() for g in self.seg_grads]
            entry["v_b"] = self.v_b
            go = self.extra.get("grad_out")
            entry["grad_out"] = None if go is None else go.detach()
        return entry


def accumulate(buffers: dict[int, list[torch.Tensor | None]], batch: int,
               wgrads: Sequence[torch.Tensor | None],
               borrowed: Sequence[torch.Tensor | None] = ()) -> None:
    """Add weight gradients to batch ``batch``'s buffer (micro-batches, or a split
    backward's W, accumulate into one gradient per batch; ``U`` applies it).

    The buffer is added into in place, as torch's own ``AccumulateGrad`` does: a backward
    that adds holds the buffer and its new gradient, never a third tensor for their sum (a
    whole stage's gradient more at the moment of the addition, on a GPU inside the peak).
    Adding in place needs every buffer tensor to be the buffer's alone, so a gradient becomes
    the buffer itself only when no other gradient of ``wgrads`` and no tensor of ``borrowed``
    shares its storage (autograd returns one tensor for both inputs of ``a + b``, and may
    return the incoming gradient, or a view of it, as a parameter's); else a copy is kept."""
    buf = buffers.get(batch)
    if buf is None:
        buf = buffers[batch] = [None] * len(wgrads)
    stores = any(g is not None and prev is None for g, prev in zip(wgrads, buf))
    shared = _shared_storages([*wgrads, *borrowed]) if stores else set()
    for i, g in enumerate(wgrads):
        if g is None:
            continue
        prev = buf[i]
        if prev is not None:
            prev.add_(g)
        else:
            g = g.detach()
            buf[i] = g.clone() if _storage_of(g) in shared else g


def _storage_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _shared_storages(tensors: Sequence[torch.Tensor | None]) -> set[int]:
    """The storages more than one of ``tensors`` use."""
    uses = Counter(_storage_of(t) for t in tensors if t is not None)
    return {key for key, n in uses.items() if n > 1}
