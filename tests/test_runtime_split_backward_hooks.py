"""SplitBackward (stalesim.runtime.split_backward): the forward hooks keep each
parameter-owning module's output, and W's walk gives the ordinary weight gradients."""

from __future__ import annotations

import torch
from torch import nn

from stalesim.runtime.split_backward import SplitBackward
from stalesim.runtime.stage_record import Inflight


def test_w_walk_from_the_kept_outputs_equals_the_full_backward():
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    params = list(mod.parameters())
    box: dict[str, list | None] = {"kept": None}
    sb = SplitBackward(mod, params, lambda: box["kept"])
    assert sb.owner_params == [[0, 1], [2, 3]] and sb.rest_params == []
    x = torch.randn(5, 3, dtype=torch.float64)
    segments: list = []
    box["kept"] = segments
    y = mod(x)
    box["kept"] = None
    assert [k for k, _ in segments] == [0, 1]
    mod(x)  # outside a split forward nothing is kept
    assert len(segments) == 2
    ref = torch.autograd.grad(y.sum(), params, retain_graph=True)
    seg_grads = list(torch.autograd.grad(y.sum(), [o for _, o in segments], retain_graph=True))
    rec = Inflight(x=x, y=y, leaves=params, v_f=0, segments=segments, seg_grads=seg_grads)
    got = sb.weight_grads(rec)
    for a, b in zip(got, ref):
        assert a is not None and torch.allclose(a, b, rtol=1e-12, atol=0)
