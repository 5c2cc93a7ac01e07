"""The data-parallel workers of a user's loop: the all-reduce on ``.grad`` and the tables it refuses."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject.workers import WorkerGrads, check_allreduce, check_compression, first_different_worker
from stalesim.runtime.allreduce import mean_in_process
from stalesim.schedule import Kind, Schedule, ScheduleConfig, build_schedule


def _sched(name: str, **kw: int) -> Schedule:
    return build_schedule(ScheduleConfig(name, **kw))


def _worker_grads(net: torch.nn.Module, xs: list[torch.Tensor], mode: str) -> list[torch.Tensor]:
    """The loop's workers in turn on ``net``, each a forward and a backward; the .grad after the last."""
    grads = WorkerGrads(list(net.parameters()), len(xs), mode)
    for r, x in enumerate(xs):
        if r > 0:
            grads.worker_done(r - 1, 0)
        if r == len(xs) - 1:
            grads.last_worker(0)
        net(x).square().mean().backward()
    grads.finish()
    grads.remove()
    return [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("mode", ["none", "fp16", "int8"])
def test_the_loop_mean_is_the_emulators_all_reduce_bit_for_bit(mode):
    """Three workers (the division by 3 and the order of the sum are not exact by luck): the
    .grad after the last backward equals mean_in_process of the three workers' own gradients."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    xs = [torch.randn(4, 5, dtype=torch.float64) * (r + 1) for r in range(3)]
    own = []
    for x in xs:
        net.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        own.append([p.grad.clone() for p in net.parameters()])
    mean_in_process(own, mode)
    net.zero_grad(set_to_none=True)
    got = _worker_grads(net, xs, mode)
    assert all(torch.equal(a, b) for a, b in zip(got, own[0]))
    naive = [sum(ws) / 3 for ws in zip(*[[p for p in w] for w in own])]
    assert mode != "none" or all(torch.equal(a, b) for a, b in zip(got, naive))


def test_a_parameter_one_worker_did_not_reach_counts_as_zero():
    """The emulator's buffer of a worker whose backward skipped a parameter is zero, and the
    mean still divides by every worker."""
    a, b = (torch.nn.Parameter(torch.ones(3, dtype=torch.float64)) for _ in range(2))
    c = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    grads = WorkerGrads([a, b, c], 2, "none")
    (a * 2.0 + c * 8.0).sum().backward()  # worker 0 reaches a and c
    grads.worker_done(0, 0)
    grads.last_worker(0)
    (a * 4.0 + b * 6.0).sum().backward()  # worker 1 reaches a and b
    # every mean is in .grad when the last backward returns: c's lands at its end, not at the step
    assert torch.equal(a.grad, torch.full((3,), 3.0, dtype=torch.float64))
    assert torch.equal(b.grad, torch.full((3,), 3.0, dtype=torch.float64))
    assert torch.equal(c.grad, torch.full((3,), 4.0, dtype=torch.float64))
    assert not grads.sums
    with pytest.raises(StalesimError, match="backward: a gradient of step 0 arrived after its workers' all-reduce"):
        (c * 1.0).sum().backward()


def test_a_worker_without_backward_is_one_line():
    p = torch.nn.Parameter(torch.ones(2))
    grads = WorkerGrads([p], 2, "none")
    with pytest.raises(StalesimError, match="forward: worker 0 of step 4 ran no backward before worker 1's forward"):
        grads.worker_done(0, 4)


def test_compression_needs_workers_and_a_known_format():
    assert check_compression("int8", 2) == "int8"
    assert check_compression("none", 1) == "none"
    with pytest.raises(StalesimError, match=r"compression: unknown 'zip' \(known: none, fp16, int8\)"):
        check_compression("zip", 2)
    with pytest.raises(StalesimError, match="compression: 'fp16' compresses the gradient all-reduce of "
                                            "data-parallel workers; the schedule has one worker"):
        check_compression("fp16", 1)


def test_workers_whose_gradients_are_not_all_reduced_are_refused():
    sched = _sched("pipe-sgd", stages=2, workers=2, batches=4)
    check_allreduce(sched, 4)
    lists = [[a for a in acts if not (a.kind is Kind.AR and a.worker == 1 and a.batch == 2)]
             for acts in sched.device_actions]
    with pytest.raises(StalesimError, match="schedule: worker 1's gradient of stage 0, batch 2 is not all-reduced"):
        check_allreduce(dataclasses.replace(sched, device_actions=lists), 4)


def test_the_first_worker_whose_rows_differ_is_named():
    table = _sched("dp", stages=2, workers=3, batches=4).table
    assert first_different_worker(table, 3) is None
    table.vb[(2, 1, 3, None)] -= 1
    assert first_different_worker(table, 3) == 2
