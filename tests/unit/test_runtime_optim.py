"""StageOptimizer pieces and the new TrainConfig fields: schedules, clipping, directions,
validation, JSON round trip."""

from __future__ import annotations

import json
import math

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.optim import StageOptimizer, clip_, state_copies


def _cfg(**kw) -> TrainConfig:
    base = dict(model="lenet5", dataset="synthetic", iterations=10)  # noqa: C408
    base.update(kw)
    return TrainConfig(**base)


def test_lr_warmup_then_schedules():
    c = _cfg(lr=0.1, lr_warmup=4, lr_schedule="cosine", lr_min=0.01)
    assert [c.lr_at(t, 20) for t in range(4)] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert c.lr_at(4, 20) == pytest.approx(0.1)  # cosine starts after the warm-up
    assert c.lr_at(12, 20) == pytest.approx(0.01 + 0.09 * 0.5)
    assert c.lr_at(20, 20) == pytest.approx(0.01)
    s = _cfg(lr=0.1, lr_warmup=2, lr_schedule="step")
    # 18 batches after the warm-up: x0.1 from 50% of them (batch 2 + 9 on)
    assert s.lr_at(2 + 8, 20) == pytest.approx(0.1) and s.lr_at(2 + 9, 20) == pytest.approx(0.01)
    # without warm-up and floor: exactly the previous formula (CNN runs unchanged)
    plain = _cfg(lr=0.1, lr_schedule="cosine")
    for t in range(25):
        assert plain.lr_at(t, 25) == 0.1 * 0.5 * (1.0 + math.cos(math.pi * min(t / 25, 1.0)))


def test_clip_matches_torch_and_is_per_call():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g)]
    params = [torch.nn.Parameter(torch.zeros_like(x)) for x in grads]
    for p, x in zip(params, grads):
        p.grad = x.clone()
    total = torch.nn.utils.clip_grad_norm_(params, 0.5)
    mine = [x.clone() for x in grads]
    norm = clip_(mine, 0.5)
    assert float(norm) == pytest.approx(float(total))
    for p, x in zip(params, mine):
        torch.testing.assert_close(x, p.grad)
    small = [x * 1e-3 for x in grads]
    kept = [x.clone() for x in small]
    clip_(small, 0.5)
    assert all(torch.equal(a, b) for a, b in zip(small, kept))


def test_sgd_stage_optimizer_is_torch_sgd_bitwise():
    g = torch.Generator().manual_seed(1)
    w0 = [torch.randn(4, 3, generator=g), torch.randn(4, generator=g)]
    grads = [[torch.randn(4, 3, generator=g), torch.randn(4, generator=g)] for _ in range(3)]
    cfg = _cfg(lr=0.1, momentum=0.9, weight_decay=1e-3)
    a = [torch.nn.Parameter(w.clone()) for w in w0]
    b = [torch.nn.Parameter(w.clone()) for w in w0]
    mine = StageOptimizer(a, cfg)
    ref = torch.optim.SGD(b, lr=0.1, momentum=0.9, weight_decay=1e-3)
    for gs in grads:
        mine.step([x.clone() for x in gs], 0.1)
        for p, x in zip(b, gs):
            p.grad = x.clone()
        ref.step()
    assert all(torch.equal(p, q) for p, q in zip(a, b))


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_adam_direction_is_the_next_step_per_unit_lr(kind):
    g = torch.Generator().manual_seed(2)
    p = [torch.nn.Parameter(torch.randn(6, generator=g, dtype=torch.float64))]
    cfg = _cfg(optimizer=kind, betas=[0.8, 0.9], eps=1e-6, weight_decay=0.1)
    opt = StageOptimizer(p, cfg)
    assert opt.directions([p[0].detach()]) == [None]
    grads = [torch.randn(6, generator=g, dtype=torch.float64) for _ in range(3)]
    m = v = torch.zeros(6, dtype=torch.float64)
    for _k, x in enumerate(grads, start=1):
        x_eff = x + 0.1 * p[0].detach() if kind == "adam" else x
        m = 0.8 * m + 0.2 * x_eff
        v = 0.9 * v + 0.1 * x_eff * x_eff
        opt.step([x.clone()], 0.01)
    want = (m / (1 - 0.8**3)) / (torch.sqrt(v / (1 - 0.9**3)) + 1e-6)
    # AdamW's decay term is of the weights the prediction starts from, not the live ones
    other = torch.randn(6, generator=g, dtype=torch.float64)
    for base in (p[0].detach(), other):
        got = opt.directions([base])[0]
        torch.testing.assert_close(got, want + 0.1 * base if kind == "adamw" else want, rtol=1e-10, atol=1e-12)


def _ef_one_parameter(delays: list[bool]) -> list[float]:
    """Weights after each step of SGD (lr 1, no momentum) with error feedback (beta 1) on
    w = 0 with gradients 1, 2, 3, ...; ``delays[i]``: step i's gradient is delayed."""
    cfg = _cfg(lr=1.0, momentum=0.0, error_feedback=True)
    p = [torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))]
    opt = StageOptimizer(p, cfg)
    out = []
    for i, delayed in enumerate(delays, start=1):
        opt.step([torch.full((1,), float(i), dtype=torch.float64)], 1.0, delayed=delayed)
        out.append(float(p[0].detach()))
    return out


def test_error_feedback_corrects_delayed_steps_against_delayed_steps_only():
    # step 1 undelayed (pipeline fill / --warmup): Delta = -1, w = -1. Step 2 is the first
    # delayed step: no earlier delayed step, so no correction: Delta = -2, w = -3. Step 3:
    # Delta = -3, + beta (Delta_3 - Delta_2) = -1, w = -7. (Correcting step 2 against the
    # undelayed step 1 would give w = -4 after step 2 and -8 after step 3.)
    assert _ef_one_parameter([False, True, True]) == [-1.0, -3.0, -7.0]
    # an undelayed step in between ends the chain: step 4 is a first delayed step again
    assert _ef_one_parameter([True, True, False, True]) == [-1.0, -4.0, -7.0, -11.0]


@pytest.mark.parametrize("kind,decoupled", [("adam", False), ("adamw", True)])
def test_lookahead_adam_is_torch_nadam(kind, decoupled):
    """The Adam look-ahead's default is torch.optim.NAdam (momentum_decay 0.004, decoupled
    decay for AdamW), the optimizer of the paper's code; float64, where torch keeps its
    momentum product in float32 (hence 1e-7, not bitwise)."""
    g = torch.Generator().manual_seed(5)
    w0 = torch.randn(7, generator=g, dtype=torch.float64)
    grads = [torch.randn(7, generator=g, dtype=torch.float64) for _ in range(6)]
    cfg = _cfg(optimizer=kind, betas=[0.99, 0.999], eps=1e-8, weight_decay=0.05, nesterov_lookahead=True)
    a = [torch.nn.Parameter(w0.clone())]
    b = [torch.nn.Parameter(w0.clone())]
    mine = StageOptimizer(a, cfg)
    ref = torch.optim.NAdam(b, lr=0.01, betas=(0.99, 0.999), eps=1e-8, weight_decay=0.05,
                            momentum_decay=0.004, decoupled_weight_decay=decoupled)
    for x in grads:
        mine.step([x.clone()], 0.01)
        b[0].grad = x.clone()
        ref.step()
    torch.testing.assert_close(a[0].detach(), b[0].detach(), rtol=1e-7, atol=1e-9)
    # the constant-momentum variant is another trajectory
    c = [torch.nn.Parameter(w0.clone())]
    const = StageOptimizer(c, _cfg(**{**cfg.to_dict(), "lookahead_momentum": "constant"}))
    for x in grads:
        const.step([x.clone()], 0.01)
    assert not torch.allclose(c[0], a[0], rtol=1e-6, atol=0)


def test_state_copies_for_memory_accounting():
    assert state_copies(_cfg()) == 1
    assert state_copies(_cfg(momentum=0.0)) == 0
    assert state_copies(_cfg(optimizer="adamw")) == 2
    assert state_copies(_cfg(optimizer="adam", error_feedback=True)) == 3
    assert state_copies(_cfg(optimizer="muon")) == 2  # AdamW's part; the whole-model upper bound
    assert state_copies(_cfg(optimizer="muon"), muon=True) == 1  # Muon's matrices: the momentum buffer
    assert state_copies(_cfg(optimizer="muon", error_feedback=True), muon=True) == 2


@pytest.mark.parametrize("kw,needle", [
    ({"optimizer": "rmsprop"}, "optimizer: unknown 'rmsprop'"),
    ({"betas": [0.9]}, "betas:"),
    ({"betas": [0.9, 1.0]}, "betas:"),
    ({"eps": 0.0}, "eps:"),
    ({"lr_warmup": -1}, "lr_warmup:"),
    ({"lr_min": 1.0, "lr_schedule": "cosine"}, "lr_min:"),
    ({"lr_min": 0.001}, "lr_min: only the cosine"),
    ({"clip_grad_norm": -1.0}, "clip_grad_norm:"),
    ({"eval_windows": 0}, "eval_windows:"),
    ({"error_feedback_beta": 0.0}, "error_feedback_beta:"),
    ({"lookahead_momentum": "warm"}, "lookahead_momentum: unknown 'warm'"),
    ({"nadam_momentum_decay": 0.0}, "nadam_momentum_decay:"),
    ({"nesterov": True, "optimizer": "adamw"}, "nesterov:"),
    ({"nesterov": True, "momentum": 0.0}, "nesterov:"),
    ({"spike_compensation": True, "optimizer": "adam"}, "spike_compensation:"),
    ({"weight_prediction": True, "momentum": 0.0}, "weight_prediction:"),
    ({"spike_compensation": True, "nesterov": True}, "spike_compensation: is defined for heavy-ball"),
    ({"nesterov_lookahead": True, "momentum": 0.0}, "nesterov_lookahead:"),
    ({"nesterov_lookahead": True, "nesterov": True}, "nesterov_lookahead:"),
    ({"nesterov_lookahead": True, "weight_prediction": True, "optimizer": "adam"}, "nesterov_lookahead:"),
    ({"model": "gpt-char", "dataset": "cifar10"}, "dataset:"),
    ({"model": "resnet20", "dataset": "shakespeare"}, "dataset: shakespeare is text"),
])
def test_bad_values_name_the_field(kw, needle):
    with pytest.raises(StalesimError) as exc:
        _cfg(**kw).check()
    assert str(exc.value).startswith(needle.split()[0]) and needle in str(exc.value)


def test_new_fields_round_trip_through_json():
    cfg = _cfg(model="gpt-char:n_layer=2,block_size=32", dataset="shakespeare", optimizer="adamw",
               betas=[0.9, 0.95], eps=1e-7, lr_warmup=5, lr_schedule="cosine", lr=1e-3, lr_min=1e-4,
               clip_grad_norm=1.0, nesterov_lookahead=True, error_feedback=True,
               error_feedback_beta=0.5, eval_windows=64).check()
    back = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.to_dict() == cfg.to_dict()
