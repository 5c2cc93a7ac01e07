"""PipeMare's discrepancy correction in a user's loop: delta per version, and its checks.
(Its equality with the emulator is in tests/integration/test_inject_pipeline.py.)"""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2)).double()


def test_delta_is_kept_per_version_while_a_backward_reads_it():
    net = _net()
    pipe = StalePipeline(net, "stale", steps=8, split=[["0", "2"], ["4"]], pipemare_correction=True,
                         pipemare_gamma=0.5)
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.9))
    assert pipe.correct is not None
    for t in range(5):
        old = [p.detach().clone() for p in pipe.split.params[0]]
        net(torch.ones(2, 4, dtype=torch.float64) * (t + 1)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        new = [p.detach() for p in pipe.split.params[0]]
        if t == 0:  # the emulator's rule from zero: delta = (1 - gamma)(w_1 - w_0)
            assert all(torch.equal(d, (n - o) * 0.5) for d, n, o in zip(pipe.correct.deltas[0][1], new, old))
    # stale on 2 stages after 5 steps: batches 5-7 read versions 3-5 of stage 0 (forwards)
    # and 5-7 (backwards), so the deltas of versions 3, 4 and 5 are kept, none older (a delta
    # kept for a version only a forward reads is unused: the rule is the weight copies' one)
    assert sorted(pipe.correct.deltas[0]) == [3, 4, 5]
    assert pipe.versions_match()


def test_checks():
    with pytest.raises(StalesimError, match=r"pipemare_gamma: expected a number in \[0, 1\), got 1.0"):
        StalePipeline(_net(), "stale", steps=4, stages=2, pipemare_correction=True, pipemare_gamma=1.0)
    with pytest.raises(StalesimError, match="pipemare_correction: not together with weight_prediction"):
        StalePipeline(_net(), "stale", steps=4, stages=2, pipemare_correction=True, weight_prediction=True)
