"""StageRuntime's split backward: I computes only the input gradient, W only the weight
gradients, per block of the stage; together they equal the unsplit backward, and W reads
the weight version its I read even when an update of another batch runs in between."""

from __future__ import annotations

import pytest
import torch
from _runtime_helpers import replay
from torch import nn

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Action, Kind, Policy, Schedule
from stalesim.schedule.checks import validate
from stalesim.schedule.lowering import lower
from stalesim.schedule.versions import annotate


@pytest.mark.parametrize("name, M", [("zb-h1", 2), ("zb-h2", 3), ("zb-v", 2), ("dualpipev", 4),
                                     ("interleaved-1f1b", 2), ("looped-bfs", 2)])
def test_split_and_virtual_losses_equal_gpipe_float64(name, M):
    """Same stages, same micro-batching: the synchronous schedules compute gpipe's gradients;
    in float64 the per-block chain and the reordered accumulation agree to 1e-12."""
    S = 4
    _, _, ref = replay("gpipe", S, 5, M)
    sched, rts, got = replay(name, S, 5, M)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a == pytest.approx(b, rel=1e-12)
    for rt in rts:
        assert rt.deferred == {} and rt.inflight == {} and rt.buffers == {}
    if sched.splits_backward:
        used = [Action.parse(t) for rt in rts for t, _ in rt.versions_used]
        assert {a.kind for a in used} >= {Kind.I, Kind.W}


def _one_stage_async_schedule() -> Schedule:
    """One stage, two batches, U(1) between I(0) and W(0): W(0) must read version 0."""
    acts = [Action(Kind.F, 0, 0), Action(Kind.LOSS, 0, 0), Action(Kind.I, 0, 0),
            Action(Kind.F, 0, 1), Action(Kind.LOSS, 0, 1), Action(Kind.I, 0, 1),
            Action(Kind.W, 0, 1), Action(Kind.U, 0, 1), Action(Kind.W, 0, 0), Action(Kind.U, 0, 0)]
    sched = Schedule(name="custom", stages=1, batches=2, microbatches=1, workers=1,
                     policy=Policy.LATEST, device_actions=[acts], placement=[[0]],
                     split_keys=frozenset({(0, 0, 0, None), (0, 0, 1, None)}))
    sched = lower(sched)
    validate(sched)
    return annotate(sched)


def test_w_reads_the_version_its_i_read_across_an_update():
    sched = _one_stage_async_schedule()
    assert sched.table.v_b(0, 0) == 0 and sched.table.u(0, 1) == 1 and sched.table.u(0, 0) == 2
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    w0 = [p.detach().clone() for p in mod.parameters()]
    cfg = TrainConfig(schedule="sequential", stages=1, iterations=2, lr=0.5, momentum=0.0,
                      dtype="float64", batch_size=4)
    rt = StageRuntime(mod, stage=0, num_stages=1, schedule=sched, cfg=cfg)
    assert rt.split
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(4, 3, generator=g, dtype=torch.float64) for _ in range(2)]
    ys = [torch.randint(0, 2, (4,), generator=g) for _ in range(2)]
    for a in sched.device_actions[0]:
        if a.kind is Kind.F:
            rt.forward(a, xs[a.batch])
        elif a.kind is Kind.LOSS:
            rt.loss(a, ys[a.batch])
        elif a.kind is Kind.I:
            assert rt.backward_input(a, None) is None  # stage 0: no input gradient
        elif a.kind is Kind.W:
            if a.batch == 0:
                assert rt.version == 1 and 0 in rt.stash  # v0 kept for the pending W
                buf_before = dict(rt.buffers)
            rt.backward_weight(a)
            if a.batch == 0:
                got = [t.clone() for t in rt.buffers[0]]
                assert 0 not in buf_before
        elif a.kind is Kind.U:
            rt.update(a)
    assert rt.stash == {} and rt.deferred == {}
    # reference: the gradient of batch 0's loss at the version-0 weights
    ref = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    with torch.no_grad():
        for p, w in zip(ref.parameters(), w0):
            p.copy_(w)
    loss = nn.functional.cross_entropy(ref(xs[0]), ys[0])
    want = torch.autograd.grad(loss, list(ref.parameters()))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=0, atol=1e-14)
    logged = dict((t, v) for t, v in rt.versions_used if "W" in t or "I" in t)
    assert logged == {"0I0": 0, "0I1": 0, "0W1": 0, "0W0": 0}


def test_input_half_computes_no_weight_gradient():
    """I asks autograd for the input only: no weight-gradient kernel runs until W."""
    from stalesim.schedule import ScheduleConfig, build_schedule

    sched = build_schedule(ScheduleConfig("zb-h1", stages=2, batches=1, microbatches=1))
    cfg = TrainConfig(schedule="zb-h1", stages=2, iterations=1, dtype="float64", batch_size=4)
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)).double()
    rt = StageRuntime(mod, stage=0, num_stages=2, schedule=sched, cfg=cfg)
    a_f = next(a for a in sched.device_actions[0] if a.kind is Kind.F)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = rt.forward(a_f, x)
    a_i = next(a for a in sched.device_actions[0] if a.kind is Kind.I)
    gx = rt.backward_input(a_i, torch.ones_like(y))
    assert gx is not None and gx.shape == x.shape
    assert rt.buffers == {}  # no weight gradient yet
    a_w = next(a for a in sched.device_actions[0] if a.kind is Kind.W)
    rt.backward_weight(a_w)
    assert len(rt.buffers[0]) == 4 and all(g is not None for g in rt.buffers[0])


def test_a_deferred_w_survives_a_checkpoint():
    """inflight_state -> fresh runtime -> restore_forward + restore_deferred -> W gives the
    weight gradient of the uninterrupted run (what the checkpoints do for a W in flight)."""
    sched = _one_stage_async_schedule()
    cfg = TrainConfig(schedule="sequential", stages=1, iterations=2, lr=0.5, momentum=0.0,
                      dtype="float64", batch_size=4)

    def fresh():
        torch.manual_seed(0)
        mod = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
        return StageRuntime(mod, stage=0, num_stages=1, schedule=sched, cfg=cfg)

    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    y = torch.tensor([0, 1, 1, 0])
    f, loss, i, w = (next(a for a in sched.device_actions[0] if a.kind is k and a.batch == 0)
                     for k in (Kind.F, Kind.LOSS, Kind.I, Kind.W))
    ref = fresh()
    ref.forward(f, x)
    ref.loss(loss, y)
    ref.backward_input(i, None)
    saved = ref.inflight_state()
    assert "seg_grads" in saved[(0, None)]
    ref.backward_weight(w)
    want = ref.buffers[0]
    rt = fresh()
    rec = saved[(0, None)]
    rt.restore_forward(f, rec["x"], rec["weights"], rec["v_f"])
    rt.loss(loss, y)
    rt.restore_deferred(f, rec["seg_grads"], rec["v_b"], rec["grad_out"])
    rt.backward_weight(w)
    for a, b in zip(rt.buffers[0], want):
        assert torch.equal(a, b)
