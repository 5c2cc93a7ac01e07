"""Exactness of the new optimizers and optimizer-aware mitigations, in float64.

The reference is the one of ``test_emulator_exactness.py`` (explicit weight versions
per stage from the version table, hand-written forward/backward of a 3-stage tanh
MLP, memoized on "version n of stage s"), with the update written here from the
equations, independently of torch's optimizers and of ``stalesim.runtime.optim``:

* SGD with Nesterov momentum (torch's convention), Adam (L2 decay), AdamW (decoupled
  decay), per-stage gradient clipping to a global L2 norm, linear lr warm-up then a
  cosine schedule to a floor;
* (a) weight prediction along the optimizer's step (SGD: the momentum buffer; Adam:
  m_hat/(sqrt(v_hat)+eps), + wd w for AdamW with w the weights predicted from), with the
  state of the forward's version; under stashing (pipedream, 2bw) the backward reads the
  forward's predicted weights (XPipe, PipeOptim), under the latest policy (stale) its own
  prediction from the live weights;
* (b) the Nesterov look-ahead of Ajanthan et al. (ICML 2025) in the paper's own
  coordinates: d_t = gamma (w_t - w_{t-1}), w_{t+1} = w_t + d_t - eta (1 - gamma)
  grad f(w_bar + d_bar), where the pipeline's stored weights are the look-ahead points
  w + d (SGD), and its Adam form as the paper's code runs it: NAdam (Dozat 2016) with
  torch's momentum schedule mu_t = beta1 (1 - 0.5 * 0.96^(t psi)) (default) or mu = beta1;
* (c) error feedback for one-step delay: a delayed step applies Delta_t + beta (Delta_t -
  Delta_{t-1}) when the previous step was delayed too (an undelayed step has no error).

Every case: losses and final weights equal the reference to 1e-10 relative.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_emulator_exactness import CLASSES, Reference, S, tiny_mlp

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig


class OptRef(Reference):
    """Reference with the optimizer picked by the config (see the module doc)."""

    def __init__(self, emu, init):
        super().__init__(emu, init)
        self.total = self.cfg.total_iterations(self.stream.batches_per_epoch)
        self.stashes = emu.sched.policy.backward_reads_forward_version

    # --------------------------------------------------------------- schedule
    def lr(self, t: int) -> float:
        c = self.cfg
        W = c.lr_warmup
        if t < W:
            return c.lr * (t + 1) / W
        if c.lr_schedule == "cosine":
            frac = min(max((t - W) / (self.total - W), 0.0), 1.0)
            return c.lr_min + (c.lr - c.lr_min) * 0.5 * (1 + math.cos(math.pi * frac))
        assert c.lr_schedule == "constant"
        return c.lr

    def delay(self, s: int, t: int) -> int:
        """D of the update fed by batch t: max over micro-batches of u - 1 - v_F."""
        u = self.table.u(s, t, 0)
        return max(u - 1 - self.table.v_f(s, t, m, 0) for m in self.micros)

    # ----------------------------------------------------------------- update
    def _version(self, s: int, n: int):
        """(stored weights, optimizer state) of stage s after n updates."""
        c = self.cfg
        if n == 0:
            zero = tuple(torch.zeros_like(p) for p in self.init[s])
            return tuple(self.init[s]), {"t": 0, "m": zero, "v": zero, "w": tuple(self.init[s]),
                                         "w_prev": tuple(self.init[s]), "buf": None, "delta": None,
                                         "P": 1.0}
        t = self.by_update[(0, s, n)]
        y, st = self.version(s, n - 1)
        g = list(self.grad(s, t))
        if c.clip_grad_norm is not None:
            norm = math.sqrt(sum(float((gi * gi).sum()) for gi in g))
            coef = c.clip_grad_norm / (norm + 1e-6)
            if coef < 1:
                g = [gi * coef for gi in g]
        lr, wd = self.lr(t), c.weight_decay
        b1, b2 = c.betas
        new = dict(st)
        new["t"] = k = st["t"] + 1
        if c.optimizer == "sgd" and c.nesterov_lookahead:
            # Eq. 10 of Ajanthan et al. in (w, d) coordinates; stored weights y = w + d
            gamma = c.momentum
            gt = [gi + wd * yi for gi, yi in zip(g, y)]
            d = [gamma * (w - wp) for w, wp in zip(st["w"], st["w_prev"])]
            w_next = [w + di - lr * (1 - gamma) * gi for w, di, gi in zip(st["w"], d, gt)]
            new["w_prev"], new["w"] = st["w"], tuple(w_next)
            out = [wn + gamma * (wn - w) for wn, w in zip(w_next, st["w"])]
        elif c.optimizer == "sgd":
            mu = c.momentum
            gt = [gi + wd * yi for gi, yi in zip(g, y)]
            buf = gt if st["buf"] is None else [mu * bi + gi for bi, gi in zip(st["buf"], gt)]
            new["buf"] = tuple(buf)
            step = [gi + mu * bi for gi, bi in zip(gt, buf)] if c.nesterov else buf
            out = [yi - lr * si for yi, si in zip(y, step)]
        else:
            decoupled = c.optimizer == "adamw"
            base = [yi * (1 - lr * wd) for yi in y] if decoupled else list(y)
            gt = g if decoupled else [gi + wd * yi for gi, yi in zip(g, y)]
            m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(st["m"], gt)]
            v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(st["v"], gt)]
            new["m"], new["v"] = tuple(m), tuple(v)
            denom = [torch.sqrt(vi / (1 - b2**k)) + c.eps for vi in v]
            if c.nesterov_lookahead:  # NAdam (Dozat 2016) as torch.optim.NAdam
                mu, mu_next = self.nadam_mu(k), self.nadam_mu(k + 1)
                new["P"] = P = st["P"] * mu
                out = [bi - lr * ((1 - mu) * gi / (1 - P) + mu_next * mi / (1 - P * mu_next)) / di
                       for bi, gi, mi, di in zip(base, gt, m, denom)]
            else:
                out = [bi - lr * (mi / (1 - b1**k)) / di for bi, mi, di in zip(base, m, denom)]
        if c.error_feedback:
            delta = [o - yi for o, yi in zip(out, y)]
            delayed = self.delay(s, t) >= 1
            if delayed and st["delta"] is not None:
                out = [o + c.error_feedback_beta * (d - dp) for o, d, dp in zip(out, delta, st["delta"])]
            new["delta"] = tuple(delta) if delayed else None
        return tuple(out), new

    def nadam_mu(self, k: int) -> float:
        """mu_k of NAdam: beta1 (1 - 0.5 * 0.96^(k psi)), psi = 0.004 in the paper's code."""
        b1 = self.cfg.betas[0]
        if self.cfg.lookahead_momentum == "constant":
            return b1
        return b1 * (1 - 0.5 * 0.96 ** (k * self.cfg.nadam_momentum_decay))

    # ------------------------------------------------- (a) weight prediction
    def direction(self, s: int, n: int):
        """The optimizer's step per unit lr at version n (None before the first update):
        SGD's momentum buffer, Adam's m_hat/(sqrt(v_hat)+eps) (+ wd w for AdamW, w = version
        n's weights, the ones predicted from)."""
        y, st = self.version(s, n)
        if st["t"] == 0:
            return None
        if self.cfg.optimizer == "sgd":
            return st["buf"]
        b1, b2 = self.cfg.betas
        k = st["t"]
        out = [(mi / (1 - b1**k)) / (torch.sqrt(vi) / math.sqrt(1 - b2**k) + self.cfg.eps)
               for mi, vi in zip(st["m"], st["v"])]
        if self.cfg.optimizer == "adamw":
            out = [o + self.cfg.weight_decay * yi for o, yi in zip(out, y)]
        return out

    def read(self, s: int, t: int, m, w: int, v: int, D: int):
        p = self.weights(s, v)
        if not self.cfg.weight_prediction or D == 0:
            return p
        d = self.direction(s, v)
        if d is None:
            return p
        return [pi - self.lr(t) * D * di for pi, di in zip(p, d)]

    def _fwd(self, s, t, m, w):
        h = self.data(t, w, m)[0] if s == 0 else self.fwd(s - 1, t, m, w)[1]
        v = self.table.v_f(s, t, m, w)
        p = self.read(s, t, m, w, v, self.table.u(s, t, w) - 1 - v)
        z = h @ p[0].T + p[1]
        return (h, z, None) if s == S - 1 else (h, torch.tanh(z), None)

    def _bwd(self, s, t, m, w):
        h, a, _ = self.fwd(s, t, m, w)
        if self.stashes:
            v = self.table.v_f(s, t, m, w)  # the forward's weights, predicted as the forward's
        else:
            v = self.table.v_b(s, t, m, w)  # == the stage's version when B runs (latest policy)
        p = self.read(s, t, m, w, v, self.table.u(s, t, w) - 1 - v)
        y = self.data(t, w, m)[1]
        gz = self.dloss(a, y) if s == S - 1 else self.bwd(s + 1, t, m, w)[1] * (1 - a * a)
        return [gz.T @ h, gz.sum(0)], gz @ p[0]


def _run(schedule: str, N: int = 10, **kw):
    extra = {"microbatches": 2} if schedule in ("gpipe", "1f1b", "2bw") else {}
    cfg = TrainConfig(model="tiny", dataset="synthetic", schedule=schedule, stages=S, iterations=N,
                      batch_size=8, dtype="float64", num_classes=CLASSES, synthetic_size=64,
                      **{**extra, **kw}).check()
    emu = Emulator(cfg, model=tiny_mlp(), progress=False)
    init = {s: [p.detach().clone() for p in emu.rts[(0, s)].params] for s in range(S)}
    ref = OptRef(emu, init)
    summary = emu.run()
    assert not summary["diverged"] and summary["versions_match_ir"]
    torch.testing.assert_close(torch.tensor(summary["losses"]), torch.tensor(ref.losses(N)),
                               rtol=1e-10, atol=1e-12)
    table = emu.sched.versions
    for s in range(S):
        last = max(n for (_w, ss, _t), n in table.upd.items() if ss == s)
        for got, want in zip(emu.rts[(0, s)].params, ref.weights(s, last)):
            torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    return emu, ref


ADAM = {"lr": 0.05, "betas": [0.8, 0.95], "eps": 1e-6}
CASES = [
    ("sequential", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "nesterov": True}),
    ("pipedream", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "nesterov": True, "weight_decay": 0.01}),
    ("stale", {"optimizer": "adamw", "weight_decay": 0.1, **ADAM}),
    ("pipedream", {"optimizer": "adam", "weight_decay": 0.01, **ADAM}),
    ("2bw", {"optimizer": "adamw", "weight_decay": 0.1, "clip_grad_norm": 0.3, **ADAM}),
    ("gpipe", {"optimizer": "adam", "clip_grad_norm": 0.3, **ADAM}),
    ("stale", {"optimizer": "adamw", "lr_warmup": 3, "lr_schedule": "cosine", "lr_min": 0.005, **ADAM}),
    ("stale", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "clip_grad_norm": 0.2,
               "lr_warmup": 2, "lr_schedule": "cosine"}),
    # (a) weight prediction along Adam's direction (stale: latest policy)
    ("stale", {"optimizer": "adam", "weight_prediction": True, **ADAM}),
    ("stale", {"optimizer": "adamw", "weight_decay": 0.1, "weight_prediction": True, **ADAM}),
    # ... under stashing: the backward reads the forward's prediction
    ("pipedream", {"optimizer": "adam", "weight_prediction": True, **ADAM}),
    ("2bw", {"optimizer": "adamw", "weight_decay": 0.1, "weight_prediction": True, **ADAM}),
    ("pipedream", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "weight_decay": 0.01,
                   "weight_prediction": True}),
    ("stale", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "weight_prediction": True}),
    # (b) Nesterov look-ahead: SGD in the paper's (w, d) coordinates, Adam form = NAdam
    ("pipedream", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.9, "nesterov_lookahead": True}),
    ("stale", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.8, "weight_decay": 0.01,
               "nesterov_lookahead": True}),
    ("pipedream", {"optimizer": "adamw", "weight_decay": 0.1, "nesterov_lookahead": True, **ADAM}),
    ("stale", {"optimizer": "adam", "nesterov_lookahead": True, **ADAM}),
    ("pipedream", {"optimizer": "adamw", "weight_decay": 0.1, "nesterov_lookahead": True,
                   "nadam_momentum_decay": 0.3, **ADAM}),
    ("stale", {"optimizer": "adam", "nesterov_lookahead": True, "lookahead_momentum": "constant", **ADAM}),
    # (c) error feedback for one-step delay (2bw fills the pipeline with undelayed steps first)
    ("2bw", {"optimizer": "adamw", "weight_decay": 0.1, "error_feedback": True, **ADAM}),
    ("2bw", {"optimizer": "sgd", "lr": 0.2, "momentum": 0.6, "error_feedback": True,
             "error_feedback_beta": 0.5}),
    ("2bw", {"optimizer": "adam", "error_feedback": True, "warmup": 3, **ADAM}),
    ("pipedream", {"optimizer": "adam", "error_feedback": True, **ADAM}),
]


@pytest.mark.parametrize("schedule,kw", CASES,
                         ids=[f"{s}-" + "-".join(f"{k}{v}" for k, v in kw.items() if k not in ADAM)
                              for s, kw in CASES])
def test_emulator_equals_reference(schedule, kw):
    _run(schedule, **kw)


def test_reference_sees_the_mitigations():
    """Control: each mitigation changes the trajectory (the tests above are not vacuous)."""
    base = _run("2bw", optimizer="adamw", weight_decay=0.1, **ADAM)[0].state.losses
    ef = _run("2bw", optimizer="adamw", weight_decay=0.1, error_feedback=True, **ADAM)[0].state.losses
    assert base != ef
    plain = _run("stale", optimizer="adam", **ADAM)[0].state.losses
    pred = _run("stale", optimizer="adam", weight_prediction=True, **ADAM)[0].state.losses
    la = _run("stale", optimizer="adam", nesterov_lookahead=True, **ADAM)[0].state.losses
    const = _run("stale", optimizer="adam", nesterov_lookahead=True, lookahead_momentum="constant",
                 **ADAM)[0].state.losses
    assert plain != pred and plain != la and la != const
    stashed = _run("pipedream", optimizer="adam", **ADAM)[0].state.losses
    assert stashed != _run("pipedream", optimizer="adam", weight_prediction=True, **ADAM)[0].state.losses


def test_stashed_prediction_backward_reads_the_forward_weights():
    """Under pipedream with prediction, every backward reads exactly the tensors its forward
    read (the old behaviour re-predicted at the backward with the state then)."""
    from stalesim.runtime import stage as stage_mod

    seen = []
    orig = stage_mod.StageRuntime._backward_base

    def spy(self, rec, v_b):
        out = orig(self, rec, v_b)
        if rec.predicted:
            seen.append(all(torch.equal(a, b.detach()) for a, b in zip(out, rec.leaves)))
        return out

    stage_mod.StageRuntime._backward_base = spy
    try:
        _run("pipedream", optimizer="adam", weight_prediction=True, **ADAM)
    finally:
        stage_mod.StageRuntime._backward_base = orig
    assert seen and all(seen)
