"""The batched ("wide") stage runtime pieces: stacked modules, the per-run optimizer,
batch compatibility and the memory check (float64 references: the single-run code)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.runtime.batched import (
    BatchedOptimizer,
    FoldedWide,
    VmapWide,
    check_batch,
    check_fits,
    estimate_batch_bytes,
    wide,
)
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.optim import StageOptimizer
from stalesim.workloads.partition import split_stages
from stalesim.workloads.zoo import build_model

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _cfg(**kw) -> TrainConfig:
    base = dict(model="lenet5", dataset="synthetic", schedule="stale", stages=2, iterations=4,  # noqa: C408
                batch_size=8, lr=0.01, momentum=0.9)
    base.update(kw)
    return TrainConfig(**base).check()


@pytest.mark.parametrize("name,example", [
    ("lenet5", lambda: torch.randn(3, 4, 1, 28, 28, dtype=torch.float64)),
    (TINY, lambda: torch.randint(0, 128, (3, 4, 16))),
])
@pytest.mark.parametrize("generic", [False, True])
def test_wide_forward_and_gradients_equal_each_run(name, example, generic):
    torch.manual_seed(0)
    models = [build_model(name, seed=k).to(torch.float64) for k in range(3)]
    seqs = [split_stages(m, stages=1)[0] for m in models]
    w = wide(seqs, generic=generic)
    assert isinstance(w, VmapWide if generic else FoldedWide) and w.runs == 3
    x = example()
    y = w(x)
    assert y.shape[:2] == (3, 4)
    y.square().sum().backward()
    stacked = dict(w.named_parameters())
    for k, m in enumerate(seqs):
        yk = m(x[k])
        torch.testing.assert_close(y[k], yk, rtol=1e-12, atol=1e-12)
        yk.square().sum().backward()
    # every stacked leaf's slice k is run k's gradient (same count of leaves as one model)
    assert len(stacked) == len(list(seqs[0].parameters()))
    grads_k = [sorted(p.grad.norm().item() for p in m.parameters()) for m in seqs]
    for k in range(3):
        got = sorted(p.grad[k].norm().item() for p in stacked.values())
        assert got == pytest.approx(grads_k[k], rel=1e-10)


def test_batchnorm_models_are_refused_in_one_line():
    mods = [nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)) for _ in range(2)]
    with pytest.raises(StalesimError, match="running statistics") as e:
        wide(mods, what="model 'x'")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind,extra", [
    ("sgd", [{}, {"lr": 0.05, "weight_decay": 1e-3}, {"nesterov": True}, {"nesterov_lookahead": True},
             {"error_feedback": True, "clip_grad_norm": 0.5}]),
    ("adamw", [{}, {"lr": 3e-3, "weight_decay": 0.0}, {"nesterov_lookahead": True},
               {"nesterov_lookahead": True, "lookahead_momentum": "constant", "weight_decay": 0.1},
               {"nesterov_lookahead": True, "nadam_momentum_decay": 0.5, "betas": (0.99, 0.999)},
               {"error_feedback": True, "betas": (0.8, 0.95)}, {"clip_grad_norm": 0.1, "eps": 1e-6}]),
    ("adam", [{}, {"weight_decay": 0.01}]),
])
def test_batched_optimizer_equals_stage_optimizer_per_run_float64(kind, extra):
    cfgs = [_cfg(**({"optimizer": kind, "lr": 1e-2, "momentum": 0.9 if kind == "sgd" else 0.0, "seed": k} | kw))
            for k, kw in enumerate(extra)]
    K = len(cfgs)
    g = torch.Generator().manual_seed(1)
    shapes = [(4, 3), (3,)]
    init = [torch.randn(K, *s, generator=g, dtype=torch.float64) for s in shapes]
    stacked = [nn.Parameter(t.clone()) for t in init]
    singles = [[nn.Parameter(t[k].clone()) for t in init] for k in range(K)]
    bo = BatchedOptimizer(stacked, cfgs)
    so = [StageOptimizer(ps, c) for ps, c in zip(singles, cfgs)]
    for step in range(6):
        grads = [torch.randn(K, *s, generator=g, dtype=torch.float64) for s in shapes]
        lrs = [c.lr * (1 + 0.1 * step) for c in cfgs]
        delayed = step not in (0, 3)  # an undelayed step in the middle resets error feedback
        bo.step([x.clone() for x in grads], lrs, delayed=delayed)
        for k in range(K):
            so[k].step([x[k].clone() for x in grads], lrs[k], delayed=delayed)
        for k in range(K):
            for p, q in zip(stacked, singles[k]):
                torch.testing.assert_close(p[k], q.detach(), rtol=1e-12, atol=1e-14)
    base = [t * 0.5 for t in init]  # a prediction's start other than the live weights
    for k in range(K):
        for d, e in zip(bo.directions(base), so[k].directions([t[k] for t in base])):
            if e is None:
                continue
            torch.testing.assert_close(d[k], e, rtol=1e-12, atol=1e-14)


def test_check_batch_names_the_field_that_differs():
    a = _cfg()
    check_batch([a, replace(a, seed=3, lr=0.5, weight_prediction=True, weight_decay=1e-4)])
    for field, value in [("optimizer", "adamw"), ("schedule", "pipedream"), ("batch_size", 16), ("stages", 3)]:
        with pytest.raises(StalesimError, match=f"differ in {field}") as e:
            check_batch([a, replace(a, **{field: value})])
        assert "\n" not in str(e.value)
    with pytest.raises(StalesimError, match="no runs"):
        check_batch([])


def test_memory_estimate_grows_with_runs_and_refuses_what_does_not_fit():
    class LV:
        stage, versions_kept, grad_buffers, max_in_flight = 0, 2, 1, 3

    cfgs = [_cfg(optimizer="adamw", momentum=0.0)]
    one = estimate_batch_bytes(runs=1, stage_params=[1000], act_per_sample=[400], micro_batch=8,
                               liveness=[LV()], cfgs=cfgs, element_size=4)
    eight = estimate_batch_bytes(runs=8, stage_params=[1000], act_per_sample=[400], micro_batch=8,
                                 liveness=[LV()], cfgs=cfgs, element_size=4)
    assert eight["total"] == 8 * one["total"] and one["activations"] == 3 * 8 * 400
    assert one["weights"] >= 1000 * 4 * (2 + 1 + 2)  # versions + gradient + Adam's two moments
    check_fits(one, torch.device("cpu"), 1)
    huge = {k: v * 10**9 for k, v in one.items()}
    with pytest.raises(StalesimError, match=r"batched: 8 runs need about .* GiB .*--batch-runs") as e:
        check_fits(huge, torch.device("cpu"), 8)
    assert "\n" not in str(e.value)


def test_batched_muon_equals_stage_optimizer_per_run_float64():
    """Muon on the [4, 3] (tall) and [3, 5] (wide) matrices, AdamW on the vector, per-run
    momentum / Muon lr / weight decay / error feedback; the schedule's lr changes per step."""
    extra = [{}, {"muon_lr": 0.05, "muon_momentum": 0.8, "weight_decay": 0.1},
             {"error_feedback": True, "clip_grad_norm": 0.5}]
    cfgs = [_cfg(**({"optimizer": "muon", "lr": 1e-2, "seed": k} | kw)) for k, kw in enumerate(extra)]
    K = len(cfgs)
    g = torch.Generator().manual_seed(3)
    shapes = [(4, 3), (3,), (3, 5)]
    mask = [True, False, True]
    init = [torch.randn(K, *s, generator=g, dtype=torch.float64) for s in shapes]
    stacked = [nn.Parameter(t.clone()) for t in init]
    singles = [[nn.Parameter(t[k].clone()) for t in init] for k in range(K)]
    bo = BatchedOptimizer(stacked, cfgs, muon_mask=mask)
    so = [StageOptimizer(ps, c, muon_mask=mask) for ps, c in zip(singles, cfgs)]
    for step in range(6):
        grads = [torch.randn(K, *s, generator=g, dtype=torch.float64) for s in shapes]
        lrs = [c.lr * (1 + 0.1 * step) for c in cfgs]
        delayed = step not in (0, 3)  # an undelayed step in the middle resets error feedback
        bo.step([x.clone() for x in grads], lrs, delayed=delayed)
        for k in range(K):
            so[k].step([x[k].clone() for x in grads], lrs[k], delayed=delayed)
        for k in range(K):
            for p, q in zip(stacked, singles[k]):
                torch.testing.assert_close(p[k], q.detach(), rtol=1e-12, atol=1e-14)
    assert not torch.equal(stacked[0][0], stacked[0][1])  # the runs' settings differ
    buf = so[1].torch.muon.state[singles[1][0]]["momentum_buffer"]
    torch.testing.assert_close(bo.buf[0][1], buf, rtol=1e-12, atol=1e-14)
