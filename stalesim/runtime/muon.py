"""Muon for a stage's hidden matrices, AdamW for the rest (``--optimizer muon``).

Muon (Keller Jordan, 2024; ``torch.optim.Muon``) per 2-D weight W with gradient G:
B <- mu B + (1 - mu) G (torch's ``lerp``), the Nesterov step U = (1 - mu) G + mu B,
O = NS_5(U) (the quintic Newton-Schulz iteration with (a, b, c) = (3.4445, -4.7750,
2.0315) on U / ||U||_F, on the transpose when rows > cols), then
W <- W (1 - lr wd) - lr sqrt(max(1, rows / cols)) O.

**The split** (:func:`muon_mask`, the one place it is decided): Muon takes the weight
matrices of the hidden ``nn.Linear`` layers; AdamW (decoupled weight decay, ``lr``,
``betas``, ``eps``) takes everything else: embeddings (``nn.Embedding`` is not a hidden
linear map of activations), norms and biases (not matrices), the output layer (the last
weight layer of the model, on the last stage) and the local-loss heads. Convolution
kernels stay on AdamW: ``torch.optim.Muon`` accepts 2-D parameters only, and the runtime
keeps each parameter as one tensor whose storage the weight-version hooks track, so a
reshaped 2-D alias of a 4-D kernel is not something it can version; this is torch's and
Moonlight's split, not the CIFAR speed-run's (which flattens kernels).

**Precision.** torch runs the iteration in bfloat16 (as the blog does). In float32 runs
:class:`StageMuon` is ``torch.optim.Muon``'s own step; in float64 runs (the exactness
mode, where results must equal a float64 reference) the same arithmetic runs in float64.
Neither reads a value on the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7  # torch's: the floor of ||U||_F before the division


def muon_mask(module: nn.Module, *, output_stage: bool, head: nn.Module | None = None) -> list[bool]:
    """Per trainable parameter of ``module`` then ``head`` (the runtime's order): whether
    Muon updates it (see the module doc). ``output_stage``: ``module`` ends with the
    model's output layer (the last stage), which stays on AdamW."""
    owners = [m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    output = owners[-1] if output_stage and owners else None
    hidden = {id(m.weight) for m in owners
              if isinstance(m, nn.Linear) and m is not output and m.weight.requires_grad}
    mask = [id(p) in hidden for p in module.parameters() if p.requires_grad]
    if head is not None:
        mask += [False for p in head.parameters() if p.requires_grad]
    return mask


def newton_schulz(u: torch.Tensor, steps: int, *, dtype: torch.dtype) -> torch.Tensor:
    """``torch.optim._muon._zeropower_via_newtonschulz`` computed in ``dtype``, for one
    matrix (``[A, B]``) or a stack of them (``[K, A, B]``, each on its own)."""
    a, b, c = NS_COEFFICIENTS
    tall = u.shape[-2] > u.shape[-1]
    x = u.to(dtype)
    if tall:
        x = x.mT
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True)
    x = x / norm.clamp(min=NS_EPS)
    for _ in range(steps):
        gram = x @ x.mT
        if x.ndim == 2:  # torch's calls, so a float32 run can match its bits in bfloat16 too
            upd = torch.addmm(gram, gram, gram, beta=b, alpha=c)
            x = torch.addmm(x, upd, x, beta=a)
        else:
            upd = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
            x = torch.baddbmm(x, upd, x, beta=a)
    return x.mT if tall else x


def lr_ratio(shape: Sequence[int]) -> float:
    """Keller Jordan's (torch's ``"original"``) scale of a ``[rows, cols]`` update."""
    return math.sqrt(max(1.0, shape[-2] / shape[-1]))


class StageMuon(torch.optim.Muon):
    """``torch.optim.Muon`` (Nesterov, Keller Jordan's constants); float64 parameters run
    the same step with the iteration in float64 (see the module doc)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if not any(p.dtype == torch.float64 for g in self.param_groups for p in g["params"]):
            return super().step(closure)
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = st["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                u = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                o = newton_schulz(u, group["ns_steps"], dtype=p.dtype)
                p.mul_(1 - lr * wd)
                p.add_(o, alpha=-lr * lr_ratio(p.shape))
        return None


class MuonAdamW:
    """The stage's two torch optimizers as one: :class:`StageMuon` over the masked
    parameters at ``muon_lr``, ``torch.optim.AdamW`` over the others at ``lr``; a learning
    rate set per update (schedule x mitigations) scales both by the same factor."""

    def __init__(self, params: Sequence[nn.Parameter], mask: Sequence[bool], cfg: Any) -> None:
        if len(mask) != len(params):
            raise ValueError(f"muon mask has {len(mask)} entries for {len(params)} parameters")
        mats = [p for p, m in zip(params, mask) if m]
        rest = [p for p, m in zip(params, mask) if not m]
        self.base_lr, self.muon_lr = cfg.lr, cfg.muon_lr
        self.muon = StageMuon(mats, lr=cfg.muon_lr, weight_decay=cfg.weight_decay,
                              momentum=cfg.muon_momentum, nesterov=True, ns_steps=cfg.muon_ns_steps) \
            if mats else None
        betas = (float(cfg.betas[0]), float(cfg.betas[1]))
        self.adamw = torch.optim.AdamW(rest, lr=cfg.lr, betas=betas, eps=cfg.eps,
                                       weight_decay=cfg.weight_decay) if rest else None

    def _parts(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.muon, self.adamw) if o is not None]

    @property
    def state(self) -> dict[torch.Tensor, dict[str, Any]]:
        """Per parameter its state (both optimizers'; for memory accounting)."""
        out: dict[torch.Tensor, dict[str, Any]] = {}
        for o in self._parts():
            out.update(o.state)
        return out

    def set_lr(self, lr: float) -> None:
        if self.muon is not None:
            # Muon's lr follows the schedule's factor lr / base (exactly muon_lr when constant)
            self.muon.param_groups[0]["lr"] = self.muon_lr * (lr / self.base_lr)
        if self.adamw is not None:
            self.adamw.param_groups[0]["lr"] = lr

    def step(self) -> None:
        for o in self._parts():
            o.step()

    def state_dict(self) -> dict[str, Any]:
        return {"muon": None if self.muon is None else self.muon.state_dict(),
                "adamw": None if self.adamw is None else self.adamw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.muon is not None:
            self.muon.load_state_dict(state["muon"])
        if self.adamw is not None:
            self.adamw.load_state_dict(state["adamw"])
