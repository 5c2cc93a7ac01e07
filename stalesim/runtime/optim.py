"""The per-stage optimizer: SGD (momentum, Nesterov), Adam, AdamW, clipping, and the
optimizer-aware staleness mitigations.

One :class:`StageOptimizer` per (worker, stage) :class:`~stalesim.runtime.stage.StageRuntime`,
shared by the emulator and the executor, so both run the same arithmetic. It wraps
a torch optimizer over the stage's live parameters and applies the update of batch
t from that batch's gradient buffer (``U(s, t)``):

1. **clipping** (``clip_grad_norm``): the buffer is scaled so that its global L2 norm
   over *this stage's* parameters is at most the limit (torch's rule,
   ``max / (norm + 1e-6)``). Per stage, not over the whole model: in a pipeline the
   stages apply the update of batch t at different times (under ``stale`` or
   ``pipedream`` stage S-1 updates long before stage 0 has even run the backward of
   t), so a whole-model norm would need a cross-stage reduction no schedule has.
   With one stage it is torch's ``clip_grad_norm_``.
2. the base step: ``sgd`` = ``torch.optim.SGD`` (momentum, ``nesterov``, L2 weight
   decay), ``adam`` = ``torch.optim.Adam`` (L2), ``adamw`` = ``torch.optim.AdamW``
   (decoupled weight decay), ``muon`` = ``torch.optim.Muon`` on the hidden matrices and
   AdamW on the rest (:mod:`stalesim.runtime.muon`), with the learning rate of the update
   (schedule x mitigation factors);
3. the mitigations that change the update (see below).

**Optimizer state and weight versions.** The state (momentum, Adam moments, step
count) is updated only at ``U``, in update order; stashed / double-buffered weight
versions are copies of the *weights* only (a backward reads old weights, but no
schedule reads old optimizer state). Weight prediction reads the current state at
the time of the forward (and, under a weight policy that stashes, the backward reuses
the forward's predicted weights). The state is part of the runtime's checkpoint.

Mitigations that live here (flags of TrainConfig; delays from the version table):

* **weight prediction along the optimizer's direction** (``weight_prediction``):
  :meth:`StageOptimizer.directions` gives, per parameter, the step the optimizer
  takes per unit learning rate if nothing changes: SGD: the momentum buffer v
  (torch: w <- w - lr v); Adam: m_hat / (sqrt(v_hat) + eps) with the bias corrections of
  the last step; AdamW: that plus wd * w (the decoupled decay step, w = the weights the
  prediction starts from). The runtime predicts w_hat = w - lr * D * direction
  (XPipe-style for Adam; SpecTrain for SGD); see :mod:`stalesim.runtime.mitigations`
  for which weights each pass reads.
* **Nesterov look-ahead for asynchronous pipelines** (``nesterov_lookahead``;
  Ajanthan et al., ICML 2025, Eq. 10): with d_t = gamma (w_t - w_{t-1}),
  w_{t+1} = w_t + d_t - eta (1 - gamma) grad f(w_bar_t + d_bar_t), where the bar is the
  stale (delayed) point. Storing the look-ahead point y_t = w_t + d_t as the stage's
  weights turns this into a plain optimizer on y whose gradient is taken at the
  stored (stale) weights, which is exactly what a pipeline computes:
  m <- gamma m + (1 - gamma) g, y <- y - eta (gamma m + (1 - gamma) g). For ``sgd`` that
  is torch's Nesterov SGD with lr eta (1 - gamma) (gamma = ``momentum``; the paper
  uses 0.99); for ``adam``/``adamw`` the same look-ahead on the Adam-normalised
  step, i.e. NAdam (Dozat 2016; :class:`LookaheadAdam`), which is what the paper's code
  (AsyncPP) runs: torch's NAdam with decoupled decay (NAdamW), beta1 = 0.99 and
  torch's momentum schedule mu_t = beta1 (1 - 0.5 * 0.96^(0.004 t)) (``lookahead_momentum``
  "nadam", the default; "constant" keeps mu_t = beta1, our earlier reading of Eq. 10).
* **error feedback for one-step delay** (``error_feedback``): after the base step
  Delta_t (computed from a gradient that is D >= 1 updates old), the update applied is
  Delta_t + beta (Delta_t - Delta_{t-1}): the change between two consecutive delayed
  steps is the part of the update the delay withheld, fed back once (see
  docs/emulator.md for why this form; optimizer-agnostic, one weight-sized buffer).
  Delta_{t-1} is kept from delayed steps only: after an undelayed step (D = 0) the next
  delayed step is uncorrected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from stalesim.runtime.config import OPTIMIZERS  # noqa: F401  (re-export)
from stalesim.runtime.muon import MuonAdamW
from stalesim.runtime.rotation import RotatedAdam, rotation_nbytes


def nadam_mu(beta1: float, step: int, momentum_decay: float | None) -> float:
    """NAdam's momentum coefficient mu_t of step ``step`` (from 1): torch.optim.NAdam's
    schedule mu_t = beta1 (1 - 0.5 * 0.96^(t psi)), psi = ``momentum_decay`` (it starts near
    beta1 / 2 and reaches beta1 over ~1 / psi steps); ``None``: the constant mu_t = beta1
    (psi -> infinity)."""
    if momentum_decay is None:
        return beta1
    return beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))


class LookaheadAdam(torch.optim.Optimizer):
    """NAdam (Dozat 2016; torch.optim.NAdam's equations), the Adam form of the Nesterov
    look-ahead of Ajanthan et al. (see the module doc).

    Per parameter, step t (from 1), mu_t = :func:`nadam_mu`, P_t = mu_1 ... mu_t:
    g (+ wd * w for L2), m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
    denom = sqrt(v / (1 - b2^t)) + eps,
    w <- w - lr [(1 - mu_t) g / (1 - P_t) + mu_{t+1} m / (1 - P_t mu_{t+1})] / denom;
    ``decoupled``: w <- w (1 - lr wd) first instead of the L2 term (NAdamW). With
    ``momentum_decay`` None, mu_t = b1 and P_t = b1^t (the constant-momentum variant).
    Unlike torch, P_t is a Python float (torch keeps it in float32 even for float64
    weights, which a float64 reference would see at 1e-8).
    """

    def __init__(self, params: Sequence[torch.Tensor], *, lr: float, betas: tuple[float, float],
                 eps: float, weight_decay: float, decoupled: bool, momentum_decay: float | None) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay, "decoupled": decoupled,
                                  "momentum_decay": momentum_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # no closures here
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            psi = group["momentum_decay"]
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["mu_product"] = 1.0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                mu, mu_next = nadam_mu(b1, t, psi), nadam_mu(b1, t + 1, psi)
                if "mu_product" not in st:  # a checkpoint written before the schedule existed
                    st["mu_product"] = math.prod(nadam_mu(b1, i, psi) for i in range(1, t))
                st["mu_product"] = prod = st["mu_product"] * mu
                if wd:
                    if group["decoupled"]:
                        p.mul_(1 - lr * wd)
                    else:
                        g = g.add(p, alpha=wd)
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v / (1 - b2**t)).sqrt_().add_(eps)
                p.addcdiv_(g, denom, value=-lr * (1 - mu) / (1 - prod))
                p.addcdiv_(m, denom, value=-lr * mu_next / (1 - prod * mu_next))


def lookahead_decay(cfg: Any) -> float | None:
    """NAdam's momentum decay psi of the Adam look-ahead: ``--nadam-momentum-decay`` under
    ``--lookahead-momentum nadam`` (the paper's code), None (constant mu = beta1) under
    ``constant``."""
    return None if cfg.lookahead_momentum == "constant" else float(cfg.nadam_momentum_decay)


def state_copies(cfg: Any, *, muon: bool = False) -> int:
    """Parameter-sized tensors of optimizer state per parameter (memory accounting).

    ``muon``: the parameter is one of Muon's matrices (its momentum buffer only); the
    other parameters of a Muon run are AdamW's (two moments), so without the split this
    is the upper bound a whole-model estimate uses."""
    if cfg.optimizer == "sgd":
        n = 1 if cfg.momentum else 0
    else:
        n = 1 if cfg.optimizer == "muon" and muon else 2
    return n + (1 if cfg.error_feedback else 0)


def clip_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place to global L2 norm <= ``max_norm`` (torch's rule); returns the
    norm before clipping (a 0-dim tensor on the gradients' device).

    As ``torch.nn.utils.clip_grad_norm_``, without reading the norm on the host: every
    gradient is multiplied by the coefficient, or by exactly 1 where it is not < 1 (a
    synchronisation per update on CUDA otherwise). The coefficient is computed in float64,
    i.e. the Python float arithmetic of ``max_norm / (norm + 1e-6)``, then rounded to the
    gradients' dtype, as a Python scalar operand would be: on the CPU the result is the
    same bits as scaling by the Python float only when it is < 1.
    """
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    # a tensor numerator: ``float / tensor`` is reciprocal-then-multiply in torch, not a division
    limit = torch.full((), max_norm, dtype=torch.float64, device=norm.device)
    coef = limit / (norm.double() + 1e-6)
    coef = torch.where(coef < 1.0, coef, 1.0)  # NaN norm: not < 1, the gradients stay
    scale = coef.to(grads[0].dtype)
    for g in grads:
        g.mul_(scale if g.dtype == scale.dtype else coef.to(g.dtype))
    return norm


class StepCorrections:
    """Spike compensation's b-term and error feedback around one optimizer step of a stage.

    Both act on the weights around the wrapped optimizer's step and read nothing of its
    internals, so the emulator's :class:`StageOptimizer` and a user's own optimizer
    (:mod:`stalesim.inject`) apply them through this one class. :meth:`before`, with the
    gradient and the weights the step starts from: the b-term's g + wd w, and under error
    feedback those weights. :meth:`after`, once the optimizer has stepped:
    w -= lr b (g + wd w) (Kosson et al.'s b-term; the a-term scales the optimizer's own lr),
    then for a delayed update w += beta (Delta_t - Delta_{t-1}), Delta being the whole step.
    """

    def __init__(self, params: Sequence[torch.Tensor], *, error_feedback: bool, beta: float) -> None:
        self.params = list(params)
        self.error_feedback = error_feedback
        self.beta = beta
        self.prev_step: list[torch.Tensor] | None = None  # error feedback: Delta_{t-1}
        self._extra: list[torch.Tensor] | None = None
        self._old: list[torch.Tensor] | None = None

    @torch.no_grad()
    def before(self, grads: Sequence[torch.Tensor], b: float, weight_decay: float) -> None:
        """Before the step: what :meth:`after` needs of the gradient and the weights."""
        self._extra = [g + weight_decay * p if weight_decay else g
                       for g, p in zip(grads, self.params)] if b else None
        self._old = [p.detach().clone() for p in self.params] if self.error_feedback else None

    @torch.no_grad()
    def after(self, lr: float, b: float, delayed: bool) -> None:
        """After the step at learning rate ``lr`` (before the a-term): the b-term and error
        feedback; ``delayed``: the gradient was at least one update old."""
        if b and self._extra is not None:
            for p, e in zip(self.params, self._extra):
                p.add_(e, alpha=-lr * b)
        if self._old is not None:
            delta = [p.detach() - o for p, o in zip(self.params, self._old)]
            if delayed and self.prev_step is not None:
                for p, d, dp in zip(self.params, delta, self.prev_step):
                    p.add_(d - dp, alpha=self.beta)
            # only a delayed step has an error to correct: an undelayed one (pipeline fill,
            # --warmup) leaves nothing, so the next delayed step is the first of a run
            self.prev_step = delta if delayed else None
        self._extra = self._old = None


class StageOptimizer:
    """The update of one stage (see the module doc); ``torch`` is the wrapped optimizer."""

    def __init__(self, params: list[torch.nn.Parameter], cfg: Any, *,
                 muon_mask: list[bool] | None = None) -> None:
        self.params = params
        self.cfg = cfg
        # per parameter: Muon's (True) or AdamW's under --optimizer muon (see muon_mask)
        self.muon_mask = list(muon_mask) if muon_mask is not None else [False] * len(params)
        self.lr_scale = 1.0  # the look-ahead's (1 - gamma) for SGD
        self.corrections = StepCorrections(params, error_feedback=bool(cfg.error_feedback),
                                           beta=float(cfg.error_feedback_beta))
        self.torch: torch.optim.Optimizer | MuonAdamW | RotatedAdam | None = None
        # updates applied: torch's per-parameter step count, kept as a Python int so that
        # weight prediction never reads torch's step tensor (a device read when torch keeps
        # it on the device: capturable / fused optimizers)
        self.steps = 0
        if not params:
            return
        kind, wd = cfg.optimizer, cfg.weight_decay
        betas = (float(cfg.betas[0]), float(cfg.betas[1]))
        if kind == "muon":
            self.torch = MuonAdamW(params, self.muon_mask, cfg)
        elif kind == "sgd":
            nesterov = bool(cfg.nesterov or cfg.nesterov_lookahead)
            kw: dict[str, Any] = {"nesterov": True} if nesterov else {}
            self.torch = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=wd, **kw)
            if cfg.nesterov_lookahead:
                self.lr_scale = 1.0 - cfg.momentum
        elif cfg.basis_rotation:  # Adam / AdamW in each matrix's eigenbasis (stalesim.runtime.rotation)
            self.torch = RotatedAdam(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=wd,
                                     decoupled=kind == "adamw", freq=cfg.basis_rotation_freq,
                                     beta=cfg.basis_rotation_beta, max_dim=cfg.basis_rotation_max_dim)
        elif cfg.nesterov_lookahead:
            self.torch = LookaheadAdam(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=wd,
                                       decoupled=kind == "adamw", momentum_decay=lookahead_decay(cfg))
        elif kind == "adam":
            self.torch = torch.optim.Adam(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=wd)
        else:
            self.torch = torch.optim.AdamW(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=wd)

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], lr: float, *, spike: tuple[float, float] = (1.0, 0.0),
             delayed: bool = False) -> None:
        """Apply one update with gradient ``grads`` (the batch buffer; clipped in place) at
        learning rate ``lr``. ``spike`` = (a, b) of spike compensation (SGD); ``delayed``:
        the gradient is at least one update old (error feedback applies)."""
        if self.torch is None:
            return
        cfg = self.cfg
        if cfg.clip_grad_norm is not None:
            clip_(grads, cfg.clip_grad_norm)
        a, b = spike
        self.corrections.before(grads, b, cfg.weight_decay)
        for p, g in zip(self.params, grads):
            p.grad = g
        if isinstance(self.torch, MuonAdamW):
            self.torch.set_lr(lr)
        else:
            self.torch.param_groups[0]["lr"] = lr * a * self.lr_scale
        self.torch.step()
        self.steps += 1
        for p in self.params:
            p.grad = None
        self.corrections.after(lr, b, delayed)

    def state_nbytes(self) -> int:
        """Bytes of optimizer state once every parameter has been updated (the memory
        model's figure, exact per parameter: Muon's matrices hold one tensor; basis rotation
        adds its factors and bases)."""
        rot = sum(rotation_nbytes(p, self.cfg.basis_rotation_max_dim) for p in self.params) \
            if getattr(self.cfg, "basis_rotation", False) else 0
        return rot + sum(state_copies(self.cfg, muon=m) * p.untyped_storage().nbytes()
                         for p, m in zip(self.params, self.muon_mask))

    # -------------------------------------------------------------- prediction
    def directions(self, base: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Per parameter, the step per unit learning rate the optimizer would take next if
        nothing changed (None before its first update), from the weights ``base`` the
        prediction starts at (AdamW's decay term wd * w is of those weights); see the
        module doc."""
        opt = self.torch
        if opt is None:
            return []
        if isinstance(opt, MuonAdamW):  # TrainConfig refuses the combinations that ask
            raise ValueError("directions: Muon defines no next direction")
        out: list[torch.Tensor | None] = []
        if self.cfg.optimizer == "sgd":
            return [opt.state.get(p, {}).get("momentum_buffer") for p in self.params]
        b1, b2 = (float(x) for x in self.cfg.betas)
        wd = self.cfg.weight_decay if self.cfg.optimizer == "adamw" else 0.0
        for p, w in zip(self.params, base):
            st = opt.state.get(p)
            if not st:
                out.append(None)
                continue
            t = float(self.steps)
            m_hat = st["exp_avg"] / (1 - b1**t)
            denom = (st["exp_avg_sq"].sqrt() / math.sqrt(1 - b2**t)).add_(self.cfg.eps)
            d = m_hat / denom
            if wd:
                d = d + wd * w
            out.append(d)
        return out

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"torch": None if self.torch is None else self.torch.state_dict(),
                "prev_step": None if self.corrections.prev_step is None
                else [d.clone() for d in self.corrections.prev_step]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.torch is not None and state.get("torch") is not None:
            self.torch.load_state_dict(state["torch"])
            self.steps = max((int(st["step"]) for st in self.torch.state.values() if "step" in st), default=0)
        self.corrections.prev_step = state.get("prev_step")
