"""A GradScaler that skips a step inside a wrapped loop: the batch's update lands as a no-op.

The reference is the same loop whose step at that batch has zero gradients (plain SGD
without momentum or decay then leaves every weight bit for bit as it was): both must give
the same losses, the same version log, and the same weights at the end. The scaled
gradients of the other steps differ by a power of two only (the scaler halves its scale on
the skip), which unscaling undoes exactly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline

STEPS, SKIP = 6, 2


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _loop(schedule: str, skip_factor: float, *, give_scaler: bool = True
          ) -> tuple[list[float], StalePipeline, torch.nn.Module]:
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    pipe = StalePipeline(net, schedule, steps=STEPS, split=["0", "2"])
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    pipe.attach(opt, scaler=scaler if give_scaler else None)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(STEPS, 16, 4, generator=g), torch.randint(0, 2, (STEPS, 16), generator=g)
    losses = []
    for t in range(STEPS):
        loss = F.cross_entropy(net(xs[t]), ys[t])
        losses.append(loss.item())
        scaler.scale(loss * (skip_factor if t == SKIP else 1.0)).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    return losses, pipe, net


@pytest.mark.parametrize("schedule", ["pipedream", "stale", "2bw"])
def test_a_skipped_step_is_a_no_op_update(schedule):
    skipped, pipe, net = _loop(schedule, float("inf"))
    zeroed, ref, ref_net = _loop(schedule, 0.0)
    assert pipe.skipped == [SKIP] and ref.skipped == []
    assert skipped == zeroed
    assert pipe.versions_match() and ref.versions_match()
    assert pipe.log.upd == ref.log.upd
    for a, b in zip(net.parameters(), ref_net.parameters()):
        assert torch.equal(a, b)


def test_without_the_scaler_a_skipped_step_is_refused():
    with pytest.raises(StalesimError, match="forward: step 2 already ran its 1 micro-batch"):
        _loop("pipedream", float("inf"), give_scaler=False)


def test_the_scaler_must_be_a_grad_scaler_and_close_restores_it():
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    pipe = StalePipeline(net, "stale", steps=2, split=["0", "2"])
    with pytest.raises(StalesimError, match="scaler: expected a torch.amp.GradScaler, got object"):
        pipe.attach(opt, scaler=object())  # type: ignore[arg-type]
    scaler = torch.amp.GradScaler("cpu")
    pipe.attach(opt, scaler=scaler)
    assert "step" in vars(scaler)
    pipe.close()
    assert "step" not in vars(scaler)


class _Branchy(torch.nn.Module):
    """A model whose ``extra`` layer only some batches use (data-dependent, as an MoE expert)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.extra, self.last = torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, extra: bool) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        if extra:
            h = h + torch.tanh(self.extra(h))
        return self.last(h)


def _workers_loop(scaled: bool) -> tuple[list[float], torch.nn.Module]:
    net = _Branchy()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    pipe = StalePipeline(net, "pipe-sgd", steps=STEPS, split=["first", ["extra", "last"]], workers=2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, enabled=scaled)
    pipe.attach(opt, scaler=scaler)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(STEPS, 2, 8, 4, generator=g), torch.randint(0, 2, (STEPS, 2, 8), generator=g)
    losses = []
    for t in range(STEPS):
        for r in range(2):  # worker 1 never reaches ``extra``: its mean lands at the end of its backward
            loss = F.cross_entropy(net(xs[t, r], extra=r == 0), ys[t, r])
            losses.append(loss.item())
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert pipe.versions_match() and pipe.skipped == []
    return losses, net


def test_workers_grads_are_the_mean_before_the_scaler_unscales_them():
    """With workers, ``.grad`` holds the all-reduced mean when the last backward returns, also
    for a parameter the last worker did not reach, so the scaler unscales every mean: the loop
    with a scaler (a power-of-two scale, undone exactly) equals the loop without one."""
    plain, net = _workers_loop(scaled=False)
    scaled, scaled_net = _workers_loop(scaled=True)
    assert scaled == plain
    for a, b in zip(net.parameters(), scaled_net.parameters()):
        assert torch.equal(a, b)
