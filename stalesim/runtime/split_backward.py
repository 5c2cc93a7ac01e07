"""The split backward (``I`` then a deferrable ``W``, the zero-bubble schedules) of one stage
record: ``I`` finds the I/W cut on the record's autograd graph
(:class:`~stalesim.workloads.graph_split.GraphSplit`, whose doc gives the method) and keeps
the gradients ``W`` starts from; ``W`` computes the weight gradients from them. See
:mod:`stalesim.runtime.stage` for where they run.

Kept apart from the runtime because only the (worker, stage)s whose schedule splits a
backward use it. Any ``nn.Module`` works: modules returning tuples, called twice or out of
registration order, parameters used outside their own module's ``forward``, and parameters
the graph does not use (their gradient is None, a zero in the batch buffer, as in an
unsplit backward with ``allow_unused``).
"""

from __future__ import annotations

import torch

from stalesim.runtime.stage_record import Inflight
from stalesim.workloads.graph_split import GraphSplit

Segments = list[tuple[int, torch.Tensor]]  # the record field's type (module index, output)

_KEY = "graph_split"  # where a record keeps its split between I and W


def _split(rec: Inflight, outputs: torch.Tensor, grad_out: torch.Tensor | None) -> GraphSplit:
    return GraphSplit([outputs], [grad_out], [rec.x], rec.leaves)


def input_grad(rec: Inflight, outputs: torch.Tensor, grad_out: torch.Tensor | None) -> torch.Tensor | None:
    """``I`` of ``rec`` from ``outputs`` (its loss or stage output) and their gradient: the
    stage input's gradient (None when the input needs none); the gradients ``W`` starts from
    are kept in ``rec.seg_grads`` (what a checkpoint stores and the memory model counts)."""
    split = _split(rec, outputs, grad_out)
    gx = split.input_grads()[0]
    rec.extra[_KEY] = split
    rec.seg_grads = split.saved()
    return gx


def restore_input_grad(rec: Inflight, outputs: torch.Tensor, grad_out: torch.Tensor | None,
                       seg_grads: list[torch.Tensor | None]) -> None:
    """On resume: ``rec``'s forward was rebuilt and its ``I`` had run before the checkpoint;
    install the kept gradients on the rebuilt graph (the same forward: the same cut)."""
    split = _split(rec, outputs, grad_out)
    split.restore(seg_grads)
    rec.extra[_KEY] = split
    rec.seg_grads = list(seg_grads)


def weight_grads(rec: Inflight) -> list[torch.Tensor | None]:
    """``W``'s weight gradients of a record whose ``I`` ran, one per ``rec.leaves`` (the caller
    installs the weights its tokens unpack to); None where the graph does not use one."""
    split = rec.extra.pop(_KEY, None)
    if not isinstance(split, GraphSplit):
        raise RuntimeError("stalesim: W of a record whose I did not run")
    return split.weight_grads()
