"""GraphSplit (stalesim.workloads.graph_split): I then W on autograd's own graph give the
unsplit backward's gradients for any module structure, I computes no weight gradient and W
no input gradient, and a checkpoint's flat list restores a deferred W."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stalesim.workloads.graph_split import GraphSplit


class Patch(nn.Module):
    """A ViT patch embedding: class token and positions are the block's own parameters,
    beside its conv; ``unused`` is a parameter the forward never reads."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 5, 8))
        self.unused = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), h], 1) + self.pos


class Pair(nn.Module):
    """Returns a tuple (the module hooks of a module-level split could not take it)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x)
        return h, torch.tanh(h)


class Reuse(nn.Module):
    """A linear called twice and a scale parameter read directly at two depths (the case
    where a group's boundary nodes are linked through the input-gradient part)."""

    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()
        self.lin = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, t = self.pair(x)
        return self.lin(self.lin(h * self.scale) + t) * self.scale


def _models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    return {"vit": nn.Sequential(Patch(), enc, Reuse()).double(), "encoder": enc.double(),
            "reuse": Reuse().double()}


def _input(name: str) -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, dtype=torch.float64) if name == "vit" else torch.randn(2, 5, 8, dtype=torch.float64)


@pytest.mark.parametrize("name", ["vit", "encoder", "reuse"])
@pytest.mark.parametrize("input_grad", [True, False])
def test_i_then_w_equals_the_unsplit_backward(name: str, input_grad: bool) -> None:
    model = _models()[name]
    params = list(model.parameters())
    x = _input(name).requires_grad_(input_grad)
    g = torch.randn_like(model(x))
    ref = torch.autograd.grad(model(x), [x, *params] if input_grad else params, g, allow_unused=True)
    split = GraphSplit([model(x)], [g], [x], params)
    gx = split.input_grads()[0]
    gw = split.weight_grads()
    if input_grad:
        assert gx is not None and torch.allclose(gx, ref[0], rtol=1e-12, atol=1e-12)
        ref = ref[1:]
    else:
        assert gx is None and len(split.boundary) == 1  # no input: W is the whole backward
    assert len(gw) == len(params)
    for got, want in zip(gw, ref):
        if want is None:  # unused by the graph: None, as torch's allow_unused gives
            assert got is None
        else:
            assert got is not None and torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    if name == "vit":
        names = [n for n, _ in model.named_parameters()]
        assert gw[names.index("0.unused")] is None and gw[names.index("0.cls")] is not None


def test_i_runs_no_weight_kernel_and_w_no_input_kernel() -> None:
    """On a chain of linears each matmul node runs once in I (input half) and once in W
    (weight half): W restarts at the boundary nodes, never walks I's part again."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = model(x)
    split = GraphSplit([y], [torch.ones_like(y)], [x], list(model.parameters()))
    assert len(split.boundary) == 3 and len(split.groups) == 3  # one per linear
    runs: list[str] = []
    nodes = []
    node = y.grad_fn
    while node is not None:  # the chain's nodes, outputs first
        nodes.append(node)
        nxt = [n for n, _ in node.next_functions if n is not None and n.name() != "torch::autograd::AccumulateGrad"
               and not n.name().startswith("TBackward")]
        node = nxt[0] if nxt else None
    handles = [n.register_prehook(lambda g, n=n: runs.append(n.name())) for n in nodes]
    split.input_grads()
    in_i = list(runs)
    runs.clear()
    wg = split.weight_grads()
    for h in handles:
        h.remove()
    assert in_i.count("AddmmBackward0") == 3 and in_i.count("TanhBackward0") == 2
    assert runs.count("AddmmBackward0") == 3 and "TanhBackward0" not in runs
    assert all(w is not None for w in wg)


def test_saved_list_restores_a_deferred_w_on_a_rebuilt_graph() -> None:
    model = _models()["vit"]
    params = list(model.parameters())
    x = _input("vit").requires_grad_(True)
    g = torch.randn_like(model(x))
    first = GraphSplit([model(x)], [g], [x], params)
    first.input_grads()
    flat = first.saved()
    assert len(flat) >= len(first.boundary) and any(t is not None for t in flat)
    again = GraphSplit([model(x)], [g], [x], params)  # the forward rebuilt on resume
    again.restore(flat)
    for a, b in zip(again.weight_grads(), first.weight_grads()):
        assert (a is None) == (b is None) and (a is None or torch.equal(a, b))
    with pytest.raises(RuntimeError, match="keeps 1 gradients"):
        again.restore(flat[:1])


def test_a_loss_output_and_parameters_without_gradient() -> None:
    """grad_outputs None starts from ones (a scalar loss); a parameter that does not require a
    gradient is not asked for (None), as the runtime passes only trainable ones."""
    torch.manual_seed(2)
    lin = nn.Linear(3, 2).double()
    lin.bias.requires_grad_(False)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    split = GraphSplit([lin(x).sum()], [None], [x], [lin.weight, lin.bias])
    gx = split.input_grads()[0]
    gw, gb = split.weight_grads()
    assert gb is None and gw is not None
    assert torch.allclose(gw, x.detach().sum(0).expand(2, 3))
    assert gx is not None and torch.allclose(gx, lin.weight.detach().sum(0).expand(4, 3))
