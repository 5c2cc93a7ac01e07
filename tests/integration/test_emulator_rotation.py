"""``--basis-rotation``: exactness in float64 against a reference written from the
paper's equations (Jung, Shin and Lee, ICML 2026: Adam in the Kronecker-factored
eigenbasis, SOAP-style), under stashing, 2BW, stale weights and a split backward;
bitwise resume; executor == emulator on two gloo ranks; the refusals.

The reference is :class:`test_emulator_optimizers.OptRef` (explicit weight versions from
the version table, hand-written tiny tanh MLP) with the update written here, independently
of ``stalesim.runtime.rotation``: L <- b L + (1 - b) G G^T, R <- b R + (1 - b) G^T G; the
first basis the eigenvectors of L and R by decreasing eigenvalue; every ``freq`` updates
the columns sorted by diag(Q^T L Q) (V's rows / columns with them) and Q re-orthonormalised
from L Q by Gram-Schmidt (twice; the columns' signs do not change the step: each appears
twice in Q N Q^T, and V holds squares); M <- b1 M + (1 - b1) G,
V <- b2 V + (1 - b2) (Q_L^T G Q_R)^2, W <- W - lr Q_L [(Q_L^T M Q_R / (1 - b1^k)) /
(sqrt(V / (1 - b2^k)) + eps)] Q_R^T; Adam / AdamW for the biases.

The model's matrices are square (4 x 4): the first factor of a non-square matrix has an
eigenvalue 0 of multiplicity > 1, whose eigenvectors are any basis of that space, so two
computations that differ by rounding pick different ones and the trajectories part;
with one zero eigenvalue at most (the output layer: softmax gradients sum to zero) the
basis is unique up to the signs.

Tolerances: the losses agree to 1e-12; the final weights to 1e-10 absolute, because the
eigenvectors amplify rounding: a perturbation of the initial weights by 1e-16 relative
moves the reference's own final weights by 2.6e-11 to 3.4e-11 (pipedream, 2BW, stale), and
the emulator differs from it by 4.7e-12 to 5.6e-11, the same rounding noise.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from test_emulator_exactness import S
from test_emulator_optimizers import OptRef
from torch import nn

from stalesim.emulator.replay import Emulator
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.rotation import RotatedAdam
from stalesim.workloads.zoo import LayeredModel

N4 = 4  # inputs, width and classes


def tiny_square(seed: int = 0) -> LayeredModel:
    g = torch.Generator().manual_seed(seed)
    blocks = [("l0", nn.Sequential(nn.Flatten(), nn.Linear(N4, N4), nn.Tanh())),
              ("l1", nn.Sequential(nn.Linear(N4, N4), nn.Tanh())),
              ("l2", nn.Sequential(nn.Linear(N4, N4)))]
    model = LayeredModel(blocks, name="tiny", input_shape=(1, 1, N4), default_dataset="synthetic")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7)
    return model


def _orthonormalise(a: torch.Tensor) -> torch.Tensor:
    q = torch.zeros_like(a)
    for j in range(a.shape[1]):
        v = a[:, j].clone()
        for _ in range(2):
            v = v - q[:, :j] @ (q[:, :j].T @ v)
        q[:, j] = v / torch.linalg.vector_norm(v)
    return q


def _eigenbasis(mat: torch.Tensor) -> torch.Tensor:
    lam, vec = torch.linalg.eigh(mat)
    return vec[:, torch.argsort(lam, descending=True)]


class RotationRef(OptRef):
    """Adam / AdamW with basis rotation on the matrices (see the module doc)."""

    def _version(self, s: int, n: int):
        c = self.cfg
        if n == 0:
            p = self.init[s]
            z = tuple(torch.zeros_like(x) for x in p)
            sq = tuple(torch.zeros(x.shape[0], x.shape[0], dtype=x.dtype) if x.ndim == 2 else None for x in p)
            sr = tuple(torch.zeros(x.shape[1], x.shape[1], dtype=x.dtype) if x.ndim == 2 else None for x in p)
            return tuple(p), {"t": 0, "m": z, "v": z, "L": sq, "R": sr, "QL": sq, "QR": sr, "delta": None}
        t = self.by_update[(0, s, n)]
        y, st = self.version(s, n - 1)
        g = list(self.grad(s, t))
        if c.clip_grad_norm is not None:  # per stage, torch's rule
            coef = c.clip_grad_norm / (math.sqrt(sum(float((gi * gi).sum()) for gi in g)) + 1e-6)
            g = [gi * coef for gi in g] if coef < 1 else g
        lr, wd, (b1, b2), eps = self.lr(t), c.weight_decay, c.betas, c.eps
        b = b2 if c.basis_rotation_beta is None else c.basis_rotation_beta
        decoupled = c.optimizer == "adamw"
        k = st["t"] + 1
        new = {"t": k, "m": [], "v": [], "L": [], "R": [], "QL": [], "QR": []}
        out = []
        for i, (yi, gi) in enumerate(zip(y, g)):
            gi = gi if decoupled else gi + wd * yi
            mi = b1 * st["m"][i] + (1 - b1) * gi
            vi, L, R, QL, QR = st["v"][i], st["L"][i], st["R"][i], st["QL"][i], st["QR"][i]
            if yi.ndim == 2:
                L = b * L + (1 - b) * gi @ gi.T
                R = b * R + (1 - b) * gi.T @ gi
                if k == 1:
                    QL, QR = _eigenbasis(L), _eigenbasis(R)
                elif k % c.basis_rotation_freq == 0:
                    ol = torch.argsort(torch.diag(QL.T @ L @ QL), descending=True)
                    orr = torch.argsort(torch.diag(QR.T @ R @ QR), descending=True)
                    vi = vi[ol][:, orr]
                    QL, QR = _orthonormalise(L @ QL[:, ol]), _orthonormalise(R @ QR[:, orr])
                rot_g, rot_m = QL.T @ gi @ QR, QL.T @ mi @ QR
            else:
                rot_g, rot_m = gi, mi
            vi = b2 * vi + (1 - b2) * rot_g * rot_g
            step = (rot_m / (1 - b1**k)) / (torch.sqrt(vi / (1 - b2**k)) + eps)
            if yi.ndim == 2:
                step = QL @ step @ QR.T
            base = yi * (1 - lr * wd) if decoupled else yi
            out.append(base - lr * step)
            for key, val in (("m", mi), ("v", vi), ("L", L), ("R", R), ("QL", QL), ("QR", QR)):
                new[key].append(val)
        new = {key: tuple(v) if isinstance(v, list) else v for key, v in new.items()}
        new["delta"] = st["delta"]
        if c.error_feedback:
            # the previous step is kept from delayed steps only: an undelayed step (pipeline
            # fill) withholds nothing to correct and ends the chain (docs/emulator.md)
            delta = [o - yi for o, yi in zip(out, y)]
            delayed = self.delay(s, t) >= 1
            if delayed and st["delta"] is not None:
                out = [o + c.error_feedback_beta * (d - dp) for o, d, dp in zip(out, delta, st["delta"])]
            new["delta"] = tuple(delta) if delayed else None
        return tuple(out), new


ROT = {"optimizer": "adamw", "basis_rotation": True, "basis_rotation_freq": 3, "lr": 0.02,
       "betas": [0.8, 0.95], "eps": 1e-6, "num_classes": N4}


def _cfg(schedule: str, N: int = 10, **kw) -> TrainConfig:
    extra = {"microbatches": 2} if schedule in ("gpipe", "1f1b", "2bw", "zb-h1") else {}
    return TrainConfig(model="tiny", dataset="synthetic", schedule=schedule, stages=S, iterations=N,
                       batch_size=8, synthetic_size=64, **{"dtype": "float64", **extra, **ROT, **kw}).check()


def _run(schedule: str, N: int = 10, **kw):
    cfg = _cfg(schedule, N, **kw)
    emu = Emulator(cfg, model=tiny_square(), progress=False)
    init = {s: [p.detach().clone() for p in emu.rts[(0, s)].params] for s in range(S)}
    ref = RotationRef(emu, init)
    summary = emu.run()
    assert not summary["diverged"] and summary["versions_match"]
    torch.testing.assert_close(torch.tensor(summary["losses"]), torch.tensor(ref.losses(N)),
                               rtol=1e-12, atol=1e-12)
    table = emu.sched.versions
    for s in range(S):
        last = max(n for (_w, ss, _t), n in table.upd.items() if ss == s)
        for got, want in zip(emu.rts[(0, s)].params, ref.weights(s, last)):
            torch.testing.assert_close(got.detach(), want, rtol=1e-9, atol=1e-10)
    return emu, ref


@pytest.mark.parametrize("schedule,kw", [
    ("pipedream", {}),
    ("2bw", {"weight_decay": 0.1}),
    ("stale", {"optimizer": "adam", "weight_decay": 0.01, "basis_rotation_beta": 0.5, "lr_schedule": "cosine"}),
    ("stale", {"error_feedback": True, "basis_rotation_freq": 2}),
    ("zb-h1", {"clip_grad_norm": 0.5}),
])
def test_emulator_equals_the_rotation_reference(schedule, kw):
    _run(schedule, **kw)


def test_rotation_changes_the_trajectory():
    """Control: the reference is not vacuous (the rotated steps differ from AdamW's)."""
    rot = Emulator(_cfg("pipedream"), model=tiny_square(), progress=False).run()["losses"]
    plain = Emulator(_cfg("pipedream", basis_rotation=False), model=tiny_square(), progress=False).run()["losses"]
    assert rot[0] == plain[0]  # the first loss is before any update
    assert max(abs(a - b) for a, b in zip(rot, plain)) > 1e-3


def _weights(emu: Emulator) -> list[torch.Tensor]:
    return [t.detach().clone() for m in emu.models for t in m.state_dict().values()]


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("name,kw", [("pipedream", {}), ("2bw", {"weight_decay": 0.01})])
def test_rotation_resume_is_bitwise_identical(tmp_path, name, kw):
    """The factors, bases and moments travel in the checkpoint: an interrupted run resumed
    (across basis refreshes) equals the uninterrupted one bit for bit."""
    cfg = _cfg(name, N=12, dtype="float32", **kw)
    full = Emulator(cfg, model=tiny_square(), progress=False)
    ref = full.run()
    opt = full.rts[(0, 0)].opt.torch
    assert isinstance(opt, RotatedAdam)
    assert any("Q_L" in st and st["Q_L"].abs().sum() > 0 for st in opt.state.values())
    run_dir = tmp_path / "run"
    first = Emulator(cfg, model=tiny_square(), out=run_dir, checkpoint_every=5, progress=False)
    orig = first._step
    calls = {"n": 0}
    stop_at = len(first.steps) * 2 // 3

    def step(a):
        calls["n"] += 1
        if calls["n"] > stop_at:
            raise _Interrupt
        orig(a)

    first._step = step
    with pytest.raises(_Interrupt):
        first.run()
    second = Emulator(cfg, model=tiny_square(), out=run_dir, checkpoint_every=5, progress=False)
    res = second.run(resume=True)
    assert res["losses"] == ref["losses"]
    for a, b in zip(_weights(second), _weights(full)):
        assert torch.equal(a, b)


def test_executor_equals_emulator_with_rotation():
    """Two gloo ranks (a stale and a split-backward virtual schedule) train bit for bit as
    the emulator (basis refreshes included: every second update), and hold the memory the
    memory model predicts with the rotation's factors and bases in the optimizer state."""
    from stalesim.executor import make_job, run_local
    from stalesim.executor.rank import RECV_AHEAD
    from stalesim.validate.costmodel import predicted_peaks

    for schedule, kw in (("stale", {"stages": 2}), ("zb-v", {"stages": 4, "microbatches": 2})):
        cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule=schedule, iterations=6,
                          batch_size=16, synthetic_size=128, optimizer="adamw", lr=0.003, weight_decay=0.01,
                          basis_rotation=True, basis_rotation_freq=2, **kw).check()
        res = run_local(make_job(cfg, evaluate=False), "cpu:2", timeout_s=120)
        torch.set_num_threads(1)
        assert res["losses"] == Emulator(cfg, progress=False).run()["losses"], schedule
        measured = [res["peak_memory_bytes"][k] for k in sorted(res["peak_memory_bytes"], key=int)]
        predicted = predicted_peaks(cfg, recv_ahead=RECV_AHEAD)
        without = predicted_peaks(replace(cfg, basis_rotation=False), recv_ahead=RECV_AHEAD)
        for d, (p, m) in enumerate(zip(predicted, measured)):
            assert abs(p - m) <= 0.03 * m, f"{schedule}: device {d}: predicted {p} B, measured {m} B"
        # the factors and bases of lenet5's three linear layers (120 x 400, 84 x 120, 10 x 84),
        # float32: 1.6 MB, 6.6 x the parameters
        assert sum(predicted) - sum(without) == 4 * 2 * sum(n * n for n in (120, 400, 84, 120, 10, 84))


@pytest.mark.parametrize("kw,field", [
    ({"optimizer": "sgd"}, "basis_rotation"),
    ({"optimizer": "muon"}, "basis_rotation"),
    ({"weight_prediction": True}, "weight_prediction"),
    ({"nesterov_lookahead": True}, "nesterov_lookahead"),
    ({"basis_rotation_freq": 0}, "basis_rotation_freq"),
    ({"basis_rotation_beta": 1.0}, "basis_rotation_beta"),
    ({"basis_rotation_max_dim": 0}, "basis_rotation_max_dim"),
])
def test_bad_combinations_are_one_line_errors(kw, field):
    with pytest.raises(StalesimError, match=f"^{field}:"):
        _cfg("pipedream", **kw)


def test_cli_flags_reach_the_config():
    import argparse

    from stalesim.cli.train_args import add_train_args, train_config_from_args

    p = argparse.ArgumentParser()
    add_train_args(p)
    args = p.parse_args(["--model", "tiny", "--dataset", "synthetic", "--iterations", "2", "--optimizer", "adam",
                         "--basis-rotation", "--basis-rotation-freq", "7", "--basis-rotation-beta", "0.9",
                         "--basis-rotation-max-dim", "512"])
    cfg = train_config_from_args(args)
    assert (cfg.basis_rotation, cfg.basis_rotation_freq, cfg.basis_rotation_beta,
            cfg.basis_rotation_max_dim) == (True, 7, 0.9, 512)


def _cli(capsys, argv):
    from stalesim.cli import main

    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


STUDY = ["study", "--model", "gpt-char:n_layer=1,n_embd=8,n_head=2,block_size=8", "--dataset", "synthetic",
         "--synthetic-size", "32", "--batch-size", "8", "--eval-windows", "4",
         "--iterations", "3", "--quiet", "--seeds", "0", "--jobs", "1", "--optimizer", "adamw",
         "--schedules", "sequential,stale", "--placements", "S2", "--basis-rotation-max-dim", "8"]


def test_study_compares_basis_rotation_batched_or_not(capsys, tmp_path):
    rc, out, err = _cli(capsys, [*STUDY, "--mitigations", "none,basis-rotation", "--out", str(tmp_path / "a"),
                                 "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert {(r["schedule"], r["mitigation"]) for r in rows} >= {("stale", "none"), ("stale", "basis-rotation")}
    rot = [r for r in rows if r["mitigation"] == "basis-rotation"][0]
    plain = [r for r in rows if r["mitigation"] == "none" and r["schedule"] == rot["schedule"]][0]
    assert rot["val_loss_mean"] != plain["val_loss_mean"]
    rc, out, err = _cli(capsys, [*STUDY, "--mitigations", "none,basis-rotation", "--batched", "--json",
                                 "--out", str(tmp_path / "b")])
    assert rc == 0, err
    batched = {(r["schedule"], r["mitigation"]): r["val_loss_mean"] for r in json.loads(out)}
    # the factors are of full rank (see test_emulator_rotation_batched); float32 rounding in
    # the rotated coordinates over eps parts batched from separate runs by ~2e-4
    for r in rows:
        assert batched[(r["schedule"], r["mitigation"])] == pytest.approx(r["val_loss_mean"], rel=1e-3)


def test_plan_refuses_what_it_cannot_price(capsys, tmp_path):
    from stalesim.plan.candidates import mitigation_fields

    assert mitigation_fields("basis-rotation") == {"basis_rotation": True}
    rc, _, err = _cli(capsys, ["plan", "--model", "lenet5", "--dataset", "synthetic", "--batch-size", "32",
                               "--devices", "2", "--optimizers", "adamw", "--mitigations", "none,basis-rotation",
                               "--target-loss", "1.0", "--iterations", "10", "--target", "h100-sxm",
                               "--out", str(tmp_path / "p")])
    assert rc == 2 and err.strip().splitlines() == [
        "stalesim: error: mitigations: plan does not price basis-rotation's state and update time; compare "
        "it with study and price it with simulate --basis-rotation"]
