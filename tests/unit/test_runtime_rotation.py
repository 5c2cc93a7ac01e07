"""stalesim.runtime.rotation: the rotated step on its own (float64, against the equations
for one matrix over several refreshes), the identity case is Adam / AdamW, the state and
its byte count, the per-update FLOP count, and the ``max_dim`` guard."""

from __future__ import annotations

import pytest
import torch

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.optim import StageOptimizer, state_copies
from stalesim.runtime.rotation import RotatedAdam, rotation_flops, rotation_nbytes


def _eig(mat: torch.Tensor) -> torch.Tensor:
    lam, vec = torch.linalg.eigh(mat)
    return vec[:, torch.argsort(lam, descending=True)]


def _gs(a: torch.Tensor) -> torch.Tensor:
    q = torch.zeros_like(a)
    for j in range(a.shape[1]):
        v = a[:, j].clone()
        for _ in range(2):
            v = v - q[:, :j] @ (q[:, :j].T @ v)
        q[:, j] = v / torch.linalg.vector_norm(v)
    return q


def _reference(w: torch.Tensor, grads: list[torch.Tensor], *, lr: float, b1: float, b2: float, eps: float,
               wd: float, freq: int) -> torch.Tensor:
    """AdamW in the Kronecker-factored eigenbasis, written from the equations (see the
    module doc of stalesim.runtime.rotation); square factors of full rank."""
    r, c = w.shape
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    L, R = torch.zeros(r, r, dtype=w.dtype), torch.zeros(c, c, dtype=w.dtype)
    for k, g in enumerate(grads, 1):
        L, R = b2 * L + (1 - b2) * g @ g.T, b2 * R + (1 - b2) * g.T @ g
        if k == 1:
            ql, qr = _eig(L), _eig(R)
        elif k % freq == 0:
            ol = torch.argsort(torch.diag(ql.T @ L @ ql), descending=True)
            orr = torch.argsort(torch.diag(qr.T @ R @ qr), descending=True)
            v = v[ol][:, orr]
            ql, qr = _gs(L @ ql[:, ol]), _gs(R @ qr[:, orr])
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * (ql.T @ g @ qr) ** 2
        n = (ql.T @ m @ qr / (1 - b1**k)) / (torch.sqrt(v / (1 - b2**k)) + eps)
        w = w * (1 - lr * wd) - lr * ql @ n @ qr.T
    return w


def test_rotated_step_equals_the_equations_over_refreshes():
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    # gradients of rank 3 (a sum of 4 outer products): R is of full rank, L (5 x 5) has a
    # two-dimensional null space at first, whose basis the statistics fill in later; 7
    # updates with freq 3 cross two refreshes
    grads = [sum(torch.outer(torch.randn(5, generator=gen, dtype=torch.float64),
                             torch.randn(3, generator=gen, dtype=torch.float64)) for _ in range(4))
             for _ in range(7)]
    p = torch.nn.Parameter(w0.clone())
    opt = RotatedAdam([p], lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, decoupled=True, freq=3,
                      max_dim=4)  # the left side (5) stays unrotated: only R rotates
    for g in grads:
        p.grad = g.clone()
        opt.step()
    assert "L" not in opt.state[p] and "R" in opt.state[p]
    qr_only = _reference_right(w0, grads, lr=0.01, b1=0.9, b2=0.99, eps=1e-8, wd=0.1, freq=3)
    torch.testing.assert_close(p.detach(), qr_only, rtol=1e-12, atol=1e-13)


def _reference_right(w, grads, **kw):
    """The one-sided case: the equations with Q_L the identity."""
    r, c = w.shape
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    R = torch.zeros(c, c, dtype=w.dtype)
    b1, b2, eps, lr, wd, freq = kw["b1"], kw["b2"], kw["eps"], kw["lr"], kw["wd"], kw["freq"]
    for k, g in enumerate(grads, 1):
        R = b2 * R + (1 - b2) * g.T @ g
        if k == 1:
            q = _eig(R)
        elif k % freq == 0:
            o = torch.argsort(torch.diag(q.T @ R @ q), descending=True)
            v = v[:, o]
            q = _gs(R @ q[:, o])
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * (g @ q) ** 2
        n = (m @ q / (1 - b1**k)) / (torch.sqrt(v / (1 - b2**k)) + eps)
        w = w * (1 - lr * wd) - lr * n @ q.T
    return w


def test_two_sided_step_equals_the_equations():
    gen = torch.Generator().manual_seed(1)
    w0 = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    grads = [torch.randn(4, 4, generator=gen, dtype=torch.float64) for _ in range(8)]
    # eps 1e-4, not 1e-8: the first basis diagonalises the first gradient exactly, so its
    # off-diagonal entries in the rotated coordinates are rounding (1e-16) divided by
    # sqrt(rounding^2) + eps; with eps = 1e-8 two correct computations differ by 3e-9
    p = torch.nn.Parameter(w0.clone())
    opt = RotatedAdam([p], lr=0.01, betas=(0.9, 0.95), eps=1e-4, weight_decay=0.05, decoupled=True, freq=3)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    want = _reference(w0, grads, lr=0.01, b1=0.9, b2=0.95, eps=1e-4, wd=0.05, freq=3)
    torch.testing.assert_close(p.detach(), want, rtol=1e-11, atol=1e-12)
    assert not torch.allclose(want, _plain_adamw(w0, grads))  # the rotation changes the step


def _plain_adamw(w0, grads):
    p = torch.nn.Parameter(w0.clone())
    opt = torch.optim.AdamW([p], lr=0.01, betas=(0.9, 0.95), eps=1e-4, weight_decay=0.05)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach()


@pytest.mark.parametrize("decoupled", [False, True])
def test_vectors_take_plain_adam(decoupled):
    gen = torch.Generator().manual_seed(2)
    w0 = torch.randn(6, generator=gen, dtype=torch.float64)
    a, b = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    ours = RotatedAdam([a], lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1, decoupled=decoupled)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    theirs = kind([b], lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(6, generator=gen, dtype=torch.float64)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-14, atol=1e-15)
    assert set(ours.state[a]) == {"step", "exp_avg", "exp_avg_sq"}


def test_state_bytes_count_factors_and_bases():
    cfg = TrainConfig(model="tiny", dataset="synthetic", optimizer="adamw", basis_rotation=True,
                      basis_rotation_max_dim=6, iterations=1).check()
    w, big, b = (torch.nn.Parameter(torch.zeros(*s)) for s in ((5, 3), (7, 4), (5,)))
    opt = StageOptimizer([w, big, b], cfg)
    # Adam's two moments everywhere; (5 x 3): L, Q_L (5 x 5) and R, Q_R (3 x 3);
    # (7 x 4): the side of 7 > max_dim keeps the identity, R and Q_R (4 x 4)
    want = 4 * (2 * (15 + 28 + 5) + 2 * 25 + 2 * 9 + 2 * 16)
    assert opt.state_nbytes() == want
    assert rotation_nbytes(w) == 4 * 2 * (25 + 9) and rotation_nbytes(b) == 0
    opt.step([torch.ones_like(p) for p in (w, big, b)], 0.01)
    held = sum(t.untyped_storage().nbytes() for st in opt.torch.state.values()
               for t in st.values() if isinstance(t, torch.Tensor) and t.ndim > 0)
    assert held == want
    assert state_copies(cfg) == 2  # the rotation's matrices are counted per matrix, not per parameter byte


def test_flops_per_update():
    # (r, c) = (8, 4), freq 10: 8 r c (r + c) per update + (4 + 2 + 4/3) (r^3 + c^3) / 10
    assert rotation_flops((8, 4), 10) == pytest.approx(8 * 32 * 12 + (22 / 3) * (512 + 64) / 10)
    assert rotation_flops((8, 4), 10, max_dim=4) == pytest.approx(8 * 32 * 4 + (22 / 3) * 64 / 10)
    assert rotation_flops((8,), 10) == 0.0 and rotation_flops((9, 9), 1, max_dim=8) == 0.0
