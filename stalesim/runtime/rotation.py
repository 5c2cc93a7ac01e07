"""Basis rotation for Adam / AdamW (``--basis-rotation``; Jung, Shin and Lee, "Mitigating
Staleness in Asynchronous Pipeline Parallelism via Basis Rotation", ICML 2026).

Why: a delayed gradient hurts Adam most where the Hessian's eigenbasis is not the
coordinate basis (Adam's per-coordinate scaling then oscillates, and a stale step points
the wrong way); running Adam in an approximate eigenbasis of each weight matrix keeps the
delayed steps useful. The eigenbasis is the Kronecker-factored one of Shampoo / SOAP,
refreshed every ``freq`` updates.

Per rotated matrix W ([r, c]) with gradient G at its k-th update (k from 1; Adam's L2 term
wd W added to G first, AdamW's decoupled decay applied to W at the end):

1. statistics: L <- b L + (1 - b) G G^T, R <- b R + (1 - b) G^T G (b = ``beta``, by default
   Adam's beta2, as the paper's code);
2. basis: at k = 1, Q_L and Q_R are the eigenvectors of L and R by decreasing eigenvalue
   (``torch.linalg.eigh``); at every k divisible by ``freq``, one warm-started power step per
   side: the columns of Q are re-ordered by decreasing estimated eigenvalue diag(Q^T L Q)
   (and the second moment V's rows / columns with them, so each entry keeps its direction),
   then Q <- the Q factor of QR(L Q) (the same with R);
3. Adam in the rotated basis: M <- b1 M + (1 - b1) G (kept in the original coordinates,
   so a basis change needs no rotation of M), G' = Q_L^T G Q_R,
   V <- b2 V + (1 - b2) G'^2 (in the rotated coordinates), M' = Q_L^T M Q_R,
   N = (M' / (1 - b1^k)) / (sqrt(V / (1 - b2^k)) + eps), W <- W - lr Q_L N Q_R^T.

Which parameters rotate: every 2-D parameter (linear layers, embeddings, the output layer:
the paper's code rotates every matrix); a side longer than
``max_dim`` keeps the identity (SOAP's guard: a 50k-token embedding would need a 50k x 50k
factor). Other parameters (biases, norms, convolution kernels) take plain Adam / AdamW, which
is the same rule with both rotations the identity.

State per rotated matrix, beyond Adam's M and V: L, Q_L (r x r) and R, Q_R (c x c)
(:func:`rotation_nbytes`); compute per update beyond Adam's: two Gram products and three
two-sided rotations, plus the refresh every ``freq`` updates (:func:`rotation_flops`).
Nothing here reads a value on the host but ``torch.linalg.eigh``'s error check, on CUDA
once per matrix at its first update (the refreshes use QR, which checks nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

DEFAULT_FREQ = 10  # the paper's T_freq
DEFAULT_MAX_DIM = 10_000  # SOAP's max_precond_dim


def _sides(shape: Sequence[int], max_dim: int) -> tuple[bool, bool]:
    """(left, right): which sides of a 2-D ``shape`` get a rotation."""
    if len(shape) != 2:
        return False, False
    return shape[0] <= max_dim, shape[1] <= max_dim


def rotation_nbytes(p: torch.Tensor, max_dim: int = DEFAULT_MAX_DIM) -> int:
    """Bytes of the rotation's own state for ``p`` (L and Q_L, R and Q_R; Adam's two moments
    are counted by the optimizer's rule)."""
    left, right = _sides(p.shape, max_dim)
    n = (2 * p.shape[0] ** 2 if left else 0) + (2 * p.shape[1] ** 2 if right else 0) if p.ndim == 2 else 0
    return n * p.element_size()


def rotation_flops(shape: Sequence[int], freq: int = DEFAULT_FREQ, max_dim: int = DEFAULT_MAX_DIM) -> float:
    """Floating-point operations per update the rotation adds to Adam for a ``shape`` matrix,
    the basis refresh amortised over ``freq`` updates (the first decomposition, once, is left
    out). Per update: the two Gram products (2 r c (r + c)) and three two-sided rotations
    (G, M and the step back: 3 x 2 r c (r + c)); per refresh and side of n: diag(Q^T L Q)
    (4 n^3), L Q (2 n^3) and its QR (4/3 n^3)."""
    left, right = _sides(shape, max_dim)
    if not (left or right):
        return 0.0
    r, c = shape
    per_update = 2.0 * r * c * ((r if left else 0) + (c if right else 0)) * 4
    refresh = sum((4 + 2 + 4 / 3) * n**3 for n, on in ((r, left), (c, right)) if on)
    return per_update + refresh / freq


class RotatedAdam(torch.optim.Optimizer):
    """Adam (``decoupled=False``: L2 weight decay) or AdamW in each matrix's approximate
    eigenbasis (see the module doc); parameters outside the mask take plain Adam / AdamW."""

    def __init__(self, params: Sequence[torch.Tensor], *, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, decoupled: bool, freq: int = DEFAULT_FREQ, beta: float | None = None,
                 max_dim: int = DEFAULT_MAX_DIM) -> None:
        super().__init__(list(params), {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                        "decoupled": decoupled, "freq": freq, "beta": beta, "max_dim": max_dim})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # no closures here
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            beta = b2 if group["beta"] is None else group["beta"]
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st.update(new_factors(p, p.shape, max_dim=group["max_dim"]))
                st["step"] += 1
                k = st["step"]
                if wd and not group["decoupled"]:
                    g = g.add(p, alpha=wd)
                st["exp_avg_sq"] = update_basis(st, g, k, beta=beta, freq=group["freq"], v=st["exp_avg_sq"])
                ql, qr = st.get("Q_L"), st.get("Q_R")
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.lerp_(g, 1 - b1)
                gr = rotate(g, ql, qr)
                v.mul_(b2).addcmul_(gr, gr, value=1 - b2)
                denom = (v / (1 - b2**k)).sqrt_().add_(eps)
                n = rotate(m, ql, qr).div_(1 - b1**k).div_(denom)
                if wd and group["decoupled"]:
                    p.mul_(1 - lr * wd)
                p.add_(rotate_back(n, ql, qr), alpha=-lr)


# The rotation's own operations, on one matrix ([r, c]) or a stack of them ([K, r, c], the
# batched path's K runs, each on its own): factors and bases are keyed "L", "Q_L", "R", "Q_R"
# (a side that is not rotated has none).
def new_factors(like: torch.Tensor, shape: Sequence[int], *, max_dim: int) -> dict[str, torch.Tensor]:
    """Zero factors and bases for a matrix of ``shape`` (its last two dimensions), on
    ``like``'s dtype and device; leading dimensions are the stack."""
    if len(shape) < 2:
        return {}
    left, right = _sides(shape[-2:], max_dim)
    lead, (r, c) = tuple(shape[:-2]), tuple(shape[-2:])
    out = {}
    if left:
        out["L"], out["Q_L"] = like.new_zeros(*lead, r, r), like.new_zeros(*lead, r, r)
    if right:
        out["R"], out["Q_R"] = like.new_zeros(*lead, c, c), like.new_zeros(*lead, c, c)
    return out


def update_basis(st: dict[str, Any], g: torch.Tensor, k: int, *, beta: float | torch.Tensor, freq: int,
                 v: torch.Tensor) -> torch.Tensor:
    """Steps 1 and 2 of the module doc for the k-th update with gradient ``g``: the factors'
    EMA (``beta``: a number, or per stacked matrix a tensor that broadcasts), then the first
    decomposition (k = 1) or a refresh (k a multiple of ``freq``). Returns the second moment
    ``v`` with its entries following their directions."""
    if "L" in st:
        st["L"].lerp_(g @ g.mT, 1 - beta)
    if "R" in st:
        st["R"].lerp_(g.mT @ g, 1 - beta)
    if k == 1:
        for f, q in (("L", "Q_L"), ("R", "Q_R")):
            if f in st:  # eigenvectors by decreasing eigenvalue
                st[q].copy_(torch.linalg.eigh(st[f]).eigenvectors.flip(-1))
    elif k % freq == 0:
        for f, q, axis in (("L", "Q_L", -2), ("R", "Q_R", -1)):
            if f not in st:
                continue
            mat, basis = st[f], st[q]
            est = ((mat @ basis) * basis).sum(-2)  # diag(Q^T M Q)
            order = torch.argsort(est, dim=-1, descending=True, stable=True)
            basis = basis.gather(-1, order.unsqueeze(-2).expand_as(basis))
            idx = order.unsqueeze(-1) if axis == -2 else order.unsqueeze(-2)
            v = v.gather(axis, idx.expand_as(v))
            st[q].copy_(torch.linalg.qr(mat @ basis).Q)
    return v


def rotate(x: torch.Tensor, ql: torch.Tensor | None, qr: torch.Tensor | None) -> torch.Tensor:
    """Q_L^T x Q_R (a missing side is the identity); a new tensor."""
    if ql is not None:
        x = ql.mT @ x
    if qr is not None:
        x = x @ qr
    return x if (ql is not None or qr is not None) else x.clone()


def rotate_back(x: torch.Tensor, ql: torch.Tensor | None, qr: torch.Tensor | None) -> torch.Tensor:
    """Q_L x Q_R^T."""
    if qr is not None:
        x = x @ qr.mT
    if ql is not None:
        x = ql @ x
    return x
