"""The split backward's bookkeeping (``I`` then a deferrable ``W``, the zero-bubble schedules)
on one stage: which modules own which parameters, the forward hooks that keep those modules'
outputs, and ``W``'s weight-gradient walk. See :mod:`stalesim.runtime.stage` for the method.

Kept apart from the runtime because only the (worker, stage)s whose schedule splits a
backward need it; the others never build one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from stalesim.runtime.stage_record import Inflight

Segments = list[tuple[int, torch.Tensor]]  # (owning module index, its output) of one forward


class SplitBackward:
    """Forward hooks on every module of ``module`` that owns some of ``params`` (the stage's
    trainable parameters, in order), and the W walk over them.

    ``sink()``: the list the forward running now keeps its modules' outputs in (None outside a
    split forward: nothing is kept). The runtime's sink refers back to the runtime, so a
    split stage's runtime and its module form a cycle: freed by the cyclic collector."""

    def __init__(self, module: nn.Module, params: list[nn.Parameter], sink: Callable[[], Segments | None]) -> None:
        self._sink = sink
        index = {id(p): i for i, p in enumerate(params)}
        self.owner_params: list[list[int]] = []  # per owning module: indices into params
        covered: set[int] = set()
        for mod in module.modules():
            own = [index[id(p)] for p in mod.parameters(recurse=False) if id(p) in index]
            if not own:
                continue
            k = len(self.owner_params)
            self.owner_params.append(own)
            covered.update(own)
            mod.register_forward_hook(self._capture_hook(k))
        # parameters no module's own forward uses (W takes them from the stage output)
        self.rest_params = [i for i in range(len(params)) if i not in covered]

    def _capture_hook(self, k: int) -> Callable[..., None]:
        def hook(_mod: nn.Module, _inp: Any, out: Any) -> None:
            captured = self._sink()
            if captured is not None:
                if not isinstance(out, torch.Tensor):
                    raise RuntimeError("stalesim: a split backward needs modules with tensor outputs")
                captured.append((k, out))
        return hook

    def weight_grads(self, rec: Inflight) -> list[torch.Tensor | None]:
        """W's weight gradients of a record whose I ran (the caller installs the weights its
        tokens unpack to): each owning module's from its own output and I's gradient there."""
        assert rec.segments is not None and rec.seg_grads is not None
        wgrads: list[torch.Tensor | None] = [None] * len(rec.leaves)
        if self.rest_params:  # first, while the whole graph is still there
            outputs = rec.loss if rec.extra.get("grad_out") is None else rec.y
            assert outputs is not None
            got = torch.autograd.grad(outputs, [rec.leaves[i] for i in self.rest_params],
                                      rec.extra.get("grad_out"), retain_graph=True, allow_unused=True)
            for i, gw in zip(self.rest_params, got):
                wgrads[i] = gw
        for (k, out), g in zip(rec.segments, rec.seg_grads):
            if g is None:
                continue
            idx = self.owner_params[k]
            got = torch.autograd.grad(out, [rec.leaves[i] for i in idx], g, allow_unused=True)
            for i, gw in zip(idx, got):
                if gw is not None:
                    prev = wgrads[i]
                    wgrads[i] = gw if prev is None else prev + gw
        return wgrads
