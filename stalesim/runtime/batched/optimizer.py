"""The optimizers of K runs on stacked parameters with per-run hyper-parameters."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from stalesim.runtime.batched._scalars import _bc, _cached, _floats, _mask
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.muon import lr_ratio, newton_schulz
from stalesim.runtime.optim import lookahead_decay, nadam_mu
from stalesim.runtime.rotation import new_factors, rotate, rotate_back, update_basis


# ------------------------------------------------------------------- optimizer
class BatchedOptimizer:
    """The update of one stage for K runs at once (see the module doc).

    Same interface as :class:`~stalesim.runtime.optim.StageOptimizer`: ``step(grads, lr,
    spike=(a, b), delayed=...)`` where ``lr``, ``a``, ``b`` are per-run lists,
    ``directions()``, ``state_dict()`` / ``load_state_dict()``; ``torch`` is ``self``
    when the stage has parameters (the runtime tests it for "has an optimizer").
    """

    def __init__(self, params: list[torch.nn.Parameter], cfgs: Sequence[TrainConfig], *,
                 muon_mask: Sequence[bool] | None = None) -> None:
        self.params = params
        self.cfgs = list(cfgs)
        self.kind = cfgs[0].optimizer
        # --optimizer muon: which stacked parameters are Muon's (the per-run split)
        self.muon_mask = list(muon_mask) if muon_mask is not None else [False] * len(params)
        if len(self.muon_mask) != len(params):
            raise ValueError(f"muon mask has {len(self.muon_mask)} entries for {len(params)} parameters")
        self.torch: BatchedOptimizer | None = self if params else None
        self.steps = 0
        self.buf: list[torch.Tensor] | None = None  # SGD momentum (None before the first step)
        self.m: list[torch.Tensor] | None = None
        self.v: list[torch.Tensor] | None = None
        self.prev_step: list[torch.Tensor] | None = None
        # --basis-rotation (the same in every run of a batch): per parameter its factors and
        # bases, stacked over the runs (empty for a parameter that does not rotate)
        self.rot: list[dict[str, torch.Tensor]] | None = None
        c = self.cfgs
        self.mu = [x.momentum for x in c]
        self.wd = [x.weight_decay for x in c]
        self.b1 = [float(x.betas[0]) for x in c]
        self.b2 = [float(x.betas[1]) for x in c]
        self.eps = [x.eps for x in c]
        self.lookahead = [bool(x.nesterov_lookahead) for x in c]
        self.nadam_decay = [lookahead_decay(x) for x in c]
        self.mu_prod = [1.0] * len(c)  # the look-ahead's NAdam product of momentum coefficients
        self.nesterov = [bool(x.nesterov or x.nesterov_lookahead) for x in c]
        self.lr_scale = [1.0 - x.momentum if (self.kind == "sgd" and x.nesterov_lookahead) else 1.0 for x in c]
        self.clip = [x.clip_grad_norm for x in c]
        self.ef = [bool(x.error_feedback) for x in c]
        self.ef_beta = [x.error_feedback_beta if x.error_feedback else 0.0 for x in c]
        self.muon_mu = [x.muon_momentum for x in c]
        self.muon_lr = [x.muon_lr for x in c]
        self.base_lr = [x.lr for x in c]

    # ------------------------------------------------------------------ helpers
    def _clip(self, grads: list[torch.Tensor]) -> None:
        """Per run: scale run k's gradient to L2 norm <= clip_k over this stage (torch's rule)."""
        if all(c is None for c in self.clip) or not grads:
            return
        norms = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads]), dim=0)
        # torch's rule per run: multiply by max / (norm + 1e-6) when that is < 1, computed on
        # the device (no read of the norms) in float64, i.e. in the Python float arithmetic of
        # the single run's rule; a run without clipping has max = inf
        limit = _cached(tuple(math.inf if c is None else float(c) for c in self.clip), torch.float64,
                        norms.device)
        coef = limit / (norms.double() + 1e-6)
        todo = coef < 1.0  # False for NaN: a NaN norm leaves the gradient as it is
        for g in grads:
            scale = _bc(torch.where(todo, coef, 1.0).to(g.dtype), g)
            g.copy_(torch.where(_bc(todo, g), g * scale, g))

    # ------------------------------------------------------------------- update
    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], lr: Sequence[float], *,
             spike: tuple[Sequence[float], Sequence[float]] | None = None, delayed: bool = False) -> None:
        if not self.params:
            return
        self._clip(grads)
        K = len(self.cfgs)
        a, b = spike if spike is not None else ([1.0] * K, [0.0] * K)
        old = [p.detach().clone() for p in self.params] if any(self.ef) else None
        if self.kind == "sgd":
            self._sgd(grads, lr, a, b)
        elif self.kind == "muon":
            self._muon(grads, lr)
            self._adam(grads, lr, skip=self.muon_mask)
        elif self.cfgs[0].basis_rotation:
            self._rotated(grads, lr)
        else:
            self._adam(grads, lr)
        if old is not None:
            delta = [p.detach() - o for p, o in zip(self.params, old)]
            if delayed and self.prev_step is not None:
                for p, d, dp in zip(self.params, delta, self.prev_step):
                    p.add_(_bc(_floats(self.ef_beta, p), p) * (d - dp))
            self.prev_step = delta if delayed else None  # as StageOptimizer.step

    def _sgd(self, grads: list[torch.Tensor], lr: Sequence[float], a: Sequence[float], b: Sequence[float]) -> None:
        any_wd, any_mu, any_b = any(self.wd), any(self.mu), any(b)
        first = self.buf is None
        if any_mu and first:
            self.buf = []
        lr_eff = [lr_k * a_k * s_k for lr_k, a_k, s_k in zip(lr, a, self.lr_scale)]
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if any_wd:
                g = g.add(_bc(_floats(self.wd, p), p) * p)
            extra = g if any_b else None  # spike compensation's b-term: g + wd w (before the step)
            d = g
            if any_mu:
                assert self.buf is not None
                mu = _bc(_floats(self.mu, p), p)
                if first:
                    buf = g.clone()
                    self.buf.append(buf)
                else:
                    buf = self.buf[i].mul_(mu).add_(g)
                d = buf
                if any(self.nesterov):
                    d = torch.where(_mask(self.nesterov, p), g + mu * buf, buf)
                # runs without momentum step with g itself (torch keeps no buffer for them)
                d = torch.where(_mask([m != 0 for m in self.mu], p), d, g)
            p.sub_(_bc(_floats(lr_eff, p), p) * d)
            if extra is not None:
                p.sub_(_bc(_floats([lr_k * b_k for lr_k, b_k in zip(lr, b)], p), p) * extra)

    def _muon(self, grads: list[torch.Tensor], lr: Sequence[float]) -> None:
        """Muon on the masked matrices, run k at ``muon_lr_k * lr_k / lr0_k`` (the single
        run's :class:`~stalesim.runtime.muon.MuonAdamW`); each run's matrix orthogonalised
        on its own (a batched Newton-Schulz), in bfloat16 as torch does, float64 in float64."""
        if self.buf is None:
            self.buf = [torch.zeros_like(p) if m else p.new_empty(0) for p, m in zip(self.params, self.muon_mask)]
        steps = self.cfgs[0].muon_ns_steps
        lr_m = [mlr * (lr_k / base) for mlr, lr_k, base in zip(self.muon_lr, lr, self.base_lr)]
        for p, g, buf, m in zip(self.params, grads, self.buf, self.muon_mask):
            if not m:
                continue
            mu = _bc(_floats(self.muon_mu, p), p)
            buf.lerp_(g, _bc(_floats([1 - x for x in self.muon_mu], p), p))
            o = newton_schulz(g.lerp(buf, mu), steps,
                              dtype=torch.float64 if p.dtype == torch.float64 else torch.bfloat16)
            if any(self.wd):
                p.mul_(_bc(_floats([1 - lk * wd for lk, wd in zip(lr_m, self.wd)], p), p))
            p.sub_(_bc(_floats([lk * lr_ratio(p.shape[1:]) for lk in lr_m], p), p) * o)

    def _adam(self, grads: list[torch.Tensor], lr: Sequence[float], *, skip: Sequence[bool] | None = None) -> None:
        """Adam / AdamW; ``skip``: parameters another rule updates (Muon's), no moments kept."""
        decoupled = self.kind in ("adamw", "muon")
        skip = skip if skip is not None else [False] * len(self.params)
        if self.m is None:
            self.m = [p.new_empty(0) if k else torch.zeros_like(p) for p, k in zip(self.params, skip)]
            self.v = [p.new_empty(0) if k else torch.zeros_like(p) for p, k in zip(self.params, skip)]
        assert self.v is not None
        self.steps += 1
        t = self.steps
        bc1 = [1 - b1**t for b1 in self.b1]
        bc2_sqrt = [(1 - b2**t) ** 0.5 for b2 in self.b2]
        la = any(self.lookahead)
        # coefficient of m/denom (Adam: lr / bc1; look-ahead, NAdam: lr mu_{t+1} / (1 - P_t mu_{t+1}))
        # and of g/denom (look-ahead: lr (1 - mu_t) / (1 - P_t)), P_t = mu_1 ... mu_t per run
        mu = [nadam_mu(b1, t, psi) for b1, psi in zip(self.b1, self.nadam_decay)]
        mu_next = [nadam_mu(b1, t + 1, psi) for b1, psi in zip(self.b1, self.nadam_decay)]
        self.mu_prod = [P * m for P, m in zip(self.mu_prod, mu)]
        cm = [lr_k * mn / (1 - P * mn) if look else lr_k / c1
              for lr_k, mn, P, c1, look in zip(lr, mu_next, self.mu_prod, bc1, self.lookahead)]
        cg = [lr_k * (1 - m) / (1 - P) if look else 0.0
              for lr_k, m, P, look in zip(lr, mu, self.mu_prod, self.lookahead)]
        for p, g, m, v, k in zip(self.params, grads, self.m, self.v, skip):
            if k:
                continue
            if any(self.wd):
                if decoupled:
                    p.mul_(_bc(_floats([1 - lr_k * wd for lr_k, wd in zip(lr, self.wd)], p), p))
                else:
                    g = g.add(_bc(_floats(self.wd, p), p) * p)
            m.lerp_(g, _bc(_floats([1 - b1 for b1 in self.b1], p), p))
            v.mul_(_bc(_floats(self.b2, p), p)).add_(_bc(_floats([1 - b2 for b2 in self.b2], p), p) * g * g)
            denom = (v.sqrt() / _bc(_floats(bc2_sqrt, p), p)).add_(_bc(_floats(self.eps, p), p))
            if la:
                p.sub_(_bc(_floats(cg, p), p) * (g / denom))
            p.sub_(_bc(_floats(cm, p), p) * (m / denom))

    def _rotated(self, grads: list[torch.Tensor], lr: Sequence[float]) -> None:
        """Adam / AdamW in each run's matrix eigenbasis (:mod:`stalesim.runtime.rotation`:
        the factors' EMA, decomposition and refreshes per run's matrix, stacked), the single
        run's :class:`~stalesim.runtime.rotation.RotatedAdam` per run."""
        c0 = self.cfgs[0]
        decoupled = self.kind == "adamw"
        if self.m is None or self.v is None or self.rot is None:
            self.m = [torch.zeros_like(p) for p in self.params]
            self.v = [torch.zeros_like(p) for p in self.params]
            self.rot = [new_factors(p, p.shape, max_dim=c0.basis_rotation_max_dim) if p.dim() == 3 else {}
                        for p in self.params]
        self.steps += 1
        t = self.steps
        # the factors' EMA: --basis-rotation-beta, else each run's own beta2
        beta = [b2 if c.basis_rotation_beta is None else c.basis_rotation_beta for b2, c in zip(self.b2, self.cfgs)]
        for i, (p, g, m, st) in enumerate(zip(self.params, grads, self.m, self.rot)):
            if any(self.wd) and not decoupled:
                g = g.add(_bc(_floats(self.wd, p), p) * p)
            v = self.v[i] = update_basis(st, g, t, beta=_bc(_floats(beta, p), p), freq=c0.basis_rotation_freq,
                                         v=self.v[i])
            ql, qr = st.get("Q_L"), st.get("Q_R")
            m.lerp_(g, _bc(_floats([1 - b1 for b1 in self.b1], p), p))
            gr = rotate(g, ql, qr)
            v.mul_(_bc(_floats(self.b2, p), p)).add_(_bc(_floats([1 - b2 for b2 in self.b2], p), p) * gr * gr)
            denom = (v / _bc(_floats([1 - b2**t for b2 in self.b2], p), p)).sqrt_().add_(_bc(_floats(self.eps, p), p))
            n = rotate(m, ql, qr).div_(_bc(_floats([1 - b1**t for b1 in self.b1], p), p)).div_(denom)
            if any(self.wd) and decoupled:
                p.mul_(_bc(_floats([1 - lr_k * wd for lr_k, wd in zip(lr, self.wd)], p), p))
            p.sub_(_bc(_floats(list(lr), p), p) * rotate_back(n, ql, qr))

    # --------------------------------------------------------------- prediction
    def directions(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per parameter, each run's next step per unit lr (stacked) from the weights ``base``;
        None before the first update (see :meth:`stalesim.runtime.optim.StageOptimizer.directions`)."""
        if not self.params:
            return []
        if self.kind == "muon":  # TrainConfig refuses the combinations that ask
            raise ValueError("directions: Muon defines no next direction")
        if self.kind == "sgd":
            return list(self.buf) if self.buf is not None else [None] * len(self.params)
        if self.m is None or self.v is None or self.steps == 0:
            return [None] * len(self.params)
        t = float(self.steps)
        out: list[torch.Tensor | None] = []
        wd = self.wd if self.kind == "adamw" else [0.0] * len(self.wd)
        for p, w, m, v in zip(self.params, base, self.m, self.v):
            m_hat = m / _bc(_floats([1 - b1**t for b1 in self.b1], p), p)
            denom = (v.sqrt() / _bc(_floats([math.sqrt(1 - b2**t) for b2 in self.b2], p), p)).add_(
                _bc(_floats(self.eps, p), p))
            d = m_hat / denom
            if any(wd):
                d = d + _bc(_floats(wd, p), p) * w
            out.append(d)
        return out

    # --------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        def cl(xs: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
            return None if xs is None else [x.clone() for x in xs]

        rot = None if self.rot is None else [{k: x.clone() for k, x in st.items()} for st in self.rot]
        return {"steps": self.steps, "buf": cl(self.buf), "m": cl(self.m), "v": cl(self.v),
                "prev_step": cl(self.prev_step), "mu_prod": list(self.mu_prod), "rot": rot}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.buf, self.m, self.v = state["buf"], state["m"], state["v"]
        self.prev_step = state["prev_step"]
        if "mu_prod" in state:
            self.mu_prod = [float(x) for x in state["mu_prod"]]
        else:  # a checkpoint written before the look-ahead's schedule existed
            self.mu_prod = [math.prod(nadam_mu(b1, i, psi) for i in range(1, self.steps + 1))
                            for b1, psi in zip(self.b1, self.nadam_decay)]
        self.rot = state.get("rot")


