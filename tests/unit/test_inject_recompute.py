"""Activation checkpointing inside a wrapped loop: refused on a stage that reads older
weights (its recomputation would run on the live ones), exact on a stage that never does.

Without the guard these loops run and give losses that differ from the unwrapped-recompute
reference in the sixth digit (the recomputed forward reads version t instead of the stash):
the refusal tests fail on it, and the allowed case is compared bit for bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline
from stalesim.inject.recompute import stale_stages
from stalesim.schedule import ScheduleConfig, build_schedule

STEPS = 5


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


class _Net(torch.nn.Module):
    """Four stages a, b, c, d; ``ckpt`` names the one run under checkpoint (or none)."""

    def __init__(self, ckpt: str | None, reentrant: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 8, dtype=torch.float64)
        self.b, self.c = _Block(), _Block()
        self.d = torch.nn.Linear(8, 2, dtype=torch.float64)
        self.ckpt, self.reentrant = ckpt, reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in "abcd":
            layer = getattr(self, name)
            x = checkpoint(layer, x, use_reentrant=self.reentrant) if name == self.ckpt else layer(x)
            if name == "a":
                x = torch.tanh(x)
        return x


def _loop(schedule: str, ckpt: str | None, reentrant: bool = False) -> tuple[list[float], StalePipeline]:
    net = _Net(ckpt, reentrant)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    pipe = StalePipeline(net, schedule, steps=STEPS, split=["a", "b", "c", "d"])
    pipe.attach(opt)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(STEPS, 16, 4, generator=g, dtype=torch.float64)
    ys = torch.randint(0, 2, (STEPS, 16), generator=g)
    losses = []
    for t in range(STEPS):
        loss = F.cross_entropy(net(xs[t]), ys[t])
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return losses, pipe


def test_stale_stages_follow_the_version_table():
    def stale(name: str) -> list[bool]:
        return stale_stages(build_schedule(ScheduleConfig(name, stages=4, batches=8)).table, 4)
    assert stale("pipedream") == [True, True, True, False]  # the last stage reads what it just wrote
    assert stale("gpipe") == [False] * 4
    assert stale("stale") == [True, True, True, False]


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("schedule", ["pipedream", "stale"])
def test_checkpointing_a_stage_that_reads_older_weights_is_refused(schedule, reentrant):
    with pytest.raises(StalesimError, match=r"^activation checkpointing: module 'b\.lin' of stage 1 ran its "
                                            r"forward again in the backward .* checkpoint only stage\(s\) 3 "):
        _loop(schedule, "b", reentrant)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_a_stage_that_reads_the_live_weights_is_exact(reentrant):
    ref, ref_pipe = _loop("pipedream", None)
    got, pipe = _loop("pipedream", "d", reentrant)
    assert got == ref
    assert pipe.versions_match() and ref_pipe.versions_match()
    assert pipe.log.vf == ref_pipe.log.vf and pipe.log.vb == ref_pipe.log.vb


def test_a_synchronous_schedule_adds_no_hook():
    net = _Net(None, False)
    before = sum(len(m._forward_pre_hooks) for m in net.modules())
    pipe = StalePipeline(net, "gpipe", steps=2, split=["a", "b", "c", "d"])
    assert sum(len(m._forward_pre_hooks) for m in net.modules()) == before + 1  # the model's own hook
    pipe.close()
    assert sum(len(m._forward_pre_hooks) for m in net.modules()) == before


def test_close_removes_the_guard():
    net = _Net("b", False)
    pipe = StalePipeline(net, "pipedream", steps=2, split=["a", "b", "c", "d"])
    pipe.close()
    net(torch.randn(3, 4, dtype=torch.float64)).sum().backward()  # plain checkpointing again
    assert net.b.lin.weight.grad is not None
