"""Learning-rate mitigations in a user's loop: the emulator's factors, per stage, during the step only."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline
from stalesim.inject.mitigate import StageLR
from stalesim.schedule import ScheduleConfig, build_schedule


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_factors_are_the_tables_delays():
    """stale on 3 stages: D_F = 4, 2, 0 in the steady state, so eta / (D_F + 1) = 1/5, 1/3, 1."""
    sched = build_schedule(ScheduleConfig("stale", stages=3, batches=12))
    lr = StageLR(sched, staleness_lr=True)
    assert [lr.mits[s].lr_factor(8) for s in range(3)] == [1 / 5, 1 / 3, 1.0]
    assert StageLR(sched).active is False


def test_the_scaled_lr_lives_only_during_the_step():
    net = _net()
    pipe = StalePipeline(net, "stale", steps=8, split=["0", "2"], staleness_lr=True)
    opt = pipe.attach(torch.optim.SGD(pipe.param_groups(), lr=0.3))
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append([g["lr"] for g in o.param_groups]))
    for _ in range(5):
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.3]
    assert seen[-1] == [0.3 * pipe.lr.mits[0].lr_factor(4), 0.3 * pipe.lr.mits[1].lr_factor(4)]
    assert seen[-1][0] < seen[-1][1] == 0.3  # the first stage is the stale one


def test_a_group_spanning_two_stages_is_refused():
    net = _net()
    pipe = StalePipeline(net, "stale", steps=4, split=["0", "2"], pipemare_lr=True)
    with pytest.raises(StalesimError, match=r"optimizer: param group 0 holds parameters of stages \[0, 1\]; a "
                                            r"per-stage learning-rate mitigation needs one group per stage"):
        pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1))
    plain = StalePipeline(_net(), "stale", steps=4, split=["0", "2"])  # without a mitigation: any groups
    plain.attach(torch.optim.SGD(plain.model.parameters(), lr=0.1))


def test_a_torch_scheduler_drives_the_base_lr():
    """The attached optimizer is the user's own object: torch's schedulers take it, and the
    lr they set is the base the factor multiplies during the step."""
    net = _net()
    pipe = StalePipeline(net, "stale", steps=6, split=["0", "2"], staleness_lr=True)
    opt = pipe.attach(torch.optim.SGD(pipe.param_groups(), lr=0.4))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append(o.param_groups[1]["lr"]))
    for _ in range(6):
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    assert seen == [0.4, 0.4, 0.2, 0.2, 0.1, 0.1]  # the last stage: factor 1
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.05]
