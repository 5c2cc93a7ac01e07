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


def test_spike_compensation_scales_the_lr_by_a_during_the_step_and_adds_the_b_term():
    """stale on 2 stages: stage 0's updates are 2 batches late, so lr * mu^2 during the step,
    and after it the weights move by -lr b (g + wd w), b = (1 - mu^2) / (1 - mu)."""
    mu, lr, wd = 0.9, 0.1, 0.01
    net = _net()
    pipe = StalePipeline(net, "stale", steps=6, split=["0", "2"], spike_compensation=True)
    opt = pipe.attach(torch.optim.SGD(pipe.param_groups(), lr=lr, momentum=mu, weight_decay=wd))
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append([g["lr"] for g in o.param_groups]))
    for _ in range(4):
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    D = pipe.update.mits[0].batch_delay(3)
    assert D == 2 and pipe.update.mits[1].batch_delay(3) == 0
    assert seen[-1] == [lr * mu**D, lr]
    assert [g["lr"] for g in opt.param_groups] == [lr, lr]  # the user's lr, after the step
    assert pipe.update.mits[0].spike_coefficients(3) == (mu**D, (1 - mu**D) / (1 - mu))


@pytest.mark.parametrize(("make", "message"), [
    (lambda ps: torch.optim.Adam(ps, lr=0.1), r"optimizer: spike_compensation corrects heavy-ball SGD momentum; "
                                              r"got Adam"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1), r"optimizer: param group 0: spike_compensation needs SGD momentum > 0"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True), r"needs SGD momentum > 0 without Nesterov"),
])
def test_spike_compensation_refuses_what_it_cannot_correct(make, message):
    pipe = StalePipeline(_net(), "stale", steps=4, split=["0", "2"], spike_compensation=True)
    with pytest.raises(StalesimError, match=message):
        pipe.attach(make(pipe.param_groups()))
    one = StalePipeline(_net(), "stale", steps=4, split=["0", "2"], spike_compensation=True)
    with pytest.raises(StalesimError, match=r"param group 0 holds parameters of stages \[0, 1\]; spike_compensation"):
        one.attach(torch.optim.SGD(one.model.parameters(), lr=0.1, momentum=0.9))


@pytest.mark.parametrize("beta", [0, -1.0, float("nan"), True, "1"])
def test_error_feedback_beta_is_checked(beta):
    with pytest.raises(StalesimError, match=r"error_feedback_beta: expected a finite number > 0"):
        StalePipeline(_net(), "stale", steps=4, split=["0", "2"], error_feedback=True, error_feedback_beta=beta)


def test_error_feedback_corrects_only_delayed_updates():
    """pipedream on 2 stages: stage 1's updates are never late (no correction, nothing kept),
    stage 0's are: from its second delayed update on, the step differs from the plain one."""
    net = _net()
    pipe = StalePipeline(net, "pipedream", steps=6, split=["0", "2"], error_feedback=True)
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    for _ in range(4):
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert pipe.update.terms[1].prev_step is None
    assert pipe.update.terms[0].prev_step is not None
    assert pipe.state_dict()["update"][0] is not None
