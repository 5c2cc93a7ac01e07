"""Each mitigation: one update (or weight read) checked against its formula on a tiny MLP."""

from __future__ import annotations

import math

import pytest
import torch
from _runtime_helpers import replay

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import compress, pipemare_exponent
from stalesim.schedule import build_schedule, get_spec

LR, MU = 0.1, 0.5


def _capture_update(target_stage: int, target_batch: int):
    """on_update hook that snapshots w, g, v before the target update and checks after."""
    box = {}

    def hook(rt, a):
        if a.stage == target_stage and a.batch == target_batch:
            box["rt"] = rt
            box["w"] = [p.detach().clone() for p in rt.params]
            box["g"] = [g.clone() for g in rt.grads(a.batch)]
            box["v"] = [None if b is None else b.clone() for b in rt._bufs(box["w"])]
            box["D"] = rt.mit.batch_delay(a.batch)
            orig = rt.update

            def update(action, orig=orig):
                orig(action)
                box["w_new"] = [p.detach().clone() for p in rt.params]
                rt.update = orig

            rt.update = update

    return hook, box


def _sgdm_step(w, g, v, lr, a=1.0, b=0.0):
    """Reference: v' = mu v + g (v' = g on the first step); w' = w - lr (a v' + b g)."""
    out = []
    for wi, gi, vi in zip(w, g, v):
        vn = gi.clone() if vi is None else MU * vi + gi
        out.append(wi - lr * (a * vn + b * gi))
    return out


def _check(box, expected):
    for got, want in zip(box["w_new"], expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_plain_update_is_sgdm():
    hook, box = _capture_update(0, 4)
    replay("stale", 3, 6, lr=LR, on_update=hook)
    _check(box, _sgdm_step(box["w"], box["g"], box["v"], LR))


def test_staleness_aware_lr():
    hook, box = _capture_update(0, 4)
    replay("stale", 3, 6, lr=LR, on_update=hook, staleness_lr=True)
    assert box["D"] == 4  # stage 0 of S=3: 2(S-1-s)
    _check(box, _sgdm_step(box["w"], box["g"], box["v"], LR / (box["D"] + 1)))


def test_pipemare_lr_rescheduling():
    hook, box = _capture_update(0, 4)
    replay("stale", 3, 6, lr=LR, on_update=hook, pipemare_lr=True, pipemare_warmup=10)
    p = 1 - 4 / 10
    assert pipemare_exponent(4, 10) == pytest.approx(p)
    assert pipemare_exponent(12, 10) == 0.0
    _check(box, _sgdm_step(box["w"], box["g"], box["v"], LR * box["D"] ** (-p)))


def test_spike_compensation():
    hook, box = _capture_update(0, 4)
    replay("stale", 3, 6, lr=LR, on_update=hook, spike_compensation=True)
    D = box["D"]
    a, b = MU**D, (1 - MU**D) / (1 - MU)
    _check(box, _sgdm_step(box["w"], box["g"], box["v"], LR, a, b))
    # the gradient's total contribution equals SGDM's lr / (1 - mu)
    assert a / (1 - MU) + b == pytest.approx(1 / (1 - MU))


def test_weight_prediction_forward_and_backward_horizons():
    seen = {}

    def hook(rt, a):
        pass

    # forward of stage 0 on batch 4 runs on w - lr * D_F * v
    from stalesim.runtime import stage as stage_mod

    orig_forward = stage_mod.StageRuntime.forward

    def forward(self, action, x, **kw):
        if self.stage == 0 and action.batch == 6 and not kw:
            seen["w"] = [p.detach().clone() for p in self.params]
            seen["v"] = [None if b is None else b.clone() for b in self._bufs(seen["w"])]
            seen["D"] = self.mit.delay_forward(6)
            seen["Db"] = self.mit.delay_backward(6)
            y = orig_forward(self, action, x, **kw)
            seen["leaves"] = [t.detach().clone() for t in self.inflight[(6, None)].leaves]
            return y
        return orig_forward(self, action, x, **kw)

    stage_mod.StageRuntime.forward = forward
    try:
        replay("stale", 3, 8, lr=LR, on_update=hook, weight_prediction=True)
    finally:
        stage_mod.StageRuntime.forward = orig_forward
    assert all(v is not None for v in seen["v"])
    assert seen["D"] == 4 and seen["Db"] == 0
    for leaf, w, v in zip(seen["leaves"], seen["w"], seen["v"]):
        torch.testing.assert_close(leaf, w - LR * seen["D"] * v, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("schedule,stashes", [("pipedream", True), ("2bw", True), ("stale", False)])
def test_weight_prediction_backward_under_each_policy(schedule, stashes):
    # stashing (pipedream, 2bw): the backward reads its forward's predicted weights, which the
    # runtime passes as the base, so the mitigation predicts nothing more; latest (stale):
    # the backward predicts from the live weights over its own delay D_B
    kw = {"microbatches": 2} if schedule == "2bw" else {}
    cfg = TrainConfig(schedule=schedule, stages=3, iterations=6, weight_prediction=True,
                      lr=LR, momentum=MU, **kw)
    sched = _sched(cfg, 6)
    from stalesim.runtime.mitigations import Mitigations

    mit = Mitigations(cfg, sched, 0)
    assert mit.backward_reuses_forward is stashes and mit.backward_predicts is not stashes
    w = [torch.ones(3, dtype=torch.float64)]
    v = [torch.full((3,), 2.0, dtype=torch.float64)]
    got = mit.backward_weights(w, v, LR, 4, 0 if kw else None)
    D_B = mit.delay_backward(4, 0 if kw else None)
    torch.testing.assert_close(got[0], w[0] if stashes else w[0] - LR * D_B * v[0])


def test_pipemare_discrepancy_correction():
    cfg = TrainConfig(schedule="stale", stages=3, iterations=6, pipemare_correction=True,
                      pipemare_gamma=0.25)
    sched = _sched(cfg, 6)
    from stalesim.runtime.mitigations import Mitigations

    mit = Mitigations(cfg, sched, 0)
    w0, w1, w2 = (torch.tensor([x], dtype=torch.float64) for x in (1.0, 0.5, 0.0))
    mit.record_step([w0], [w1])
    mit.record_step([w1], [w2])
    delta = 0.25 * (0.75 * (w1 - w0)) + 0.75 * (w2 - w1)
    torch.testing.assert_close(mit.delta[0], delta)
    gap = sched.versions.v_b(0, 4) - sched.versions.v_f(0, 4)
    assert gap == 4
    got = mit.backward_weights([w2], [None], LR, 4, None)
    torch.testing.assert_close(got[0], w2 - gap * delta)
    # and end to end: a run with the correction stays finite and differs from plain stale
    _, _, l1 = replay("stale", 3, 10, lr=LR, pipemare_correction=True)
    _, _, l0 = replay("stale", 3, 10, lr=LR)
    assert all(math.isfinite(x) for x in l1) and l1 != l0


def test_compression_is_lossy_and_bounded():
    g = torch.randn(1000, dtype=torch.float64) * 1e-3
    h = compress(g, "fp16")
    assert h.dtype == g.dtype and not torch.equal(h, g)
    torch.testing.assert_close(h, g.half().double())
    q = compress(g, "int8")
    scale = g.abs().max() / 127
    assert (q - g).abs().max() <= scale / 2 + 1e-18
    assert len(torch.unique(q)) <= 255
    assert torch.equal(compress(torch.zeros(3), "int8"), torch.zeros(3))
    assert compress(g, "none") is g


def _sched(cfg: TrainConfig, batches: int):
    """The run's schedule: the one IR call every consumer makes."""
    return build_schedule(cfg.schedule_config(batches))


@pytest.mark.parametrize("name,M", [("stale", 1), ("pipedream", 1), ("2bw", 2), ("local", 1)])
def test_sync_warmup_is_built_into_the_ir(name, M):
    K, N, S = 3, 9, 3
    cfg = TrainConfig(schedule=name, stages=S, iterations=N, microbatches=M, batch_size=4 * M, warmup=K)
    sched = _sched(cfg, N)
    plain = _sched(TrainConfig(schedule=name, stages=S, iterations=N, microbatches=M,
                                             batch_size=4 * M), N)
    table = sched.versions
    for key in table.vf:
        if key[2] < K:
            assert table.staleness_of(key) == 0, key
    assert max(table.staleness()) == max(plain.versions.staleness())
    if get_spec(name).staleness_free:  # nothing to warm up: the same schedule
        assert "warmup" not in sched.params and sched.fingerprint() == plain.fingerprint()
    else:
        assert sched.params["warmup"] == K and sched.phases[0].last == K
    _, _, losses = replay(name, S, N, M, warmup=K)
    assert all(math.isfinite(x) for x in losses)


def test_pipe_sgd_warmup_uses_its_own_param():
    cfg = TrainConfig(schedule="pipe-sgd", workers=2, iterations=6, warmup=2, batch_size=8)
    sched = _sched(cfg, 6)
    assert sched.params["warmup"] == 2
