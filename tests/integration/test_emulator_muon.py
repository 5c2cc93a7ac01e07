"""``--optimizer muon``: exactness in float64 against a reference written from Muon's
equations, the parameter split, torch's own step in float32, and the refusals.

The reference is :class:`test_emulator_optimizers.OptRef` (explicit weight versions from
the version table, hand-written tiny tanh MLP) with the update written here from Keller
Jordan's Muon post, independently of ``torch.optim.Muon`` and ``stalesim.runtime.muon``:
B <- mu B + (1 - mu) G, U = (1 - mu) G + mu B, X = U / ||U||_F (on U^T when rows > cols),
five times X <- a X + (b A + c A^2) X with A = X X^T, then
W <- W (1 - lr wd) - lr sqrt(max(1, rows / cols)) X; AdamW (from its equations) for the
biases and the output layer.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_emulator_exactness import CLASSES, S, tiny_mlp
from test_emulator_optimizers import OptRef

from stalesim.emulator.replay import Emulator
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.muon import NS_COEFFICIENTS, StageMuon, muon_mask, newton_schulz
from stalesim.runtime.optim import StageOptimizer, state_copies


def _ns(u: torch.Tensor, steps: int) -> torch.Tensor:
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = x / math.sqrt(float((x * x).sum()))
    for _ in range(steps):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if tall else x


class MuonRef(OptRef):
    """Muon on the hidden layers' weight matrices (stages 0 .. S-2), AdamW elsewhere."""

    def _version(self, s: int, n: int):
        c = self.cfg
        if n == 0:
            zero = tuple(torch.zeros_like(p) for p in self.init[s])
            return tuple(self.init[s]), {"t": 0, "m": zero, "v": zero, "buf": zero}
        t = self.by_update[(0, s, n)]
        y, st = self.version(s, n - 1)
        g = list(self.grad(s, t))
        lr, wd, (b1, b2) = self.lr(t), c.weight_decay, c.betas
        k = st["t"] + 1
        mu, lr_m = c.muon_momentum, c.muon_lr * (lr / c.lr)
        out, m_new, v_new, buf_new = [], [], [], []
        for i, (yi, gi) in enumerate(zip(y, g)):
            mi, vi, bi = st["m"][i], st["v"][i], st["buf"][i]
            if yi.ndim == 2 and s < S - 1:  # a hidden layer's matrix: Muon
                bi = mu * bi + (1 - mu) * gi
                x = _ns((1 - mu) * gi + mu * bi, c.muon_ns_steps)
                out.append(yi * (1 - lr_m * wd) - lr_m * math.sqrt(max(1.0, yi.shape[0] / yi.shape[1])) * x)
            else:  # AdamW
                mi = b1 * mi + (1 - b1) * gi
                vi = b2 * vi + (1 - b2) * gi * gi
                denom = torch.sqrt(vi / (1 - b2**k)) + c.eps
                out.append(yi * (1 - lr * wd) - lr * (mi / (1 - b1**k)) / denom)
            m_new.append(mi)
            v_new.append(vi)
            buf_new.append(bi)
        if c.error_feedback:
            raise NotImplementedError
        return tuple(out), {"t": k, "m": tuple(m_new), "v": tuple(v_new), "buf": tuple(buf_new)}


MUON = {"optimizer": "muon", "lr": 0.05, "muon_lr": 0.1, "betas": [0.8, 0.95], "eps": 1e-6}


def _run(schedule: str, N: int = 10, **kw):
    extra = {"microbatches": 2} if schedule in ("gpipe", "1f1b", "2bw") else {}
    cfg = TrainConfig(model="tiny", dataset="synthetic", schedule=schedule, stages=S, iterations=N,
                      batch_size=8, dtype="float64", num_classes=CLASSES, synthetic_size=64,
                      **{**extra, **MUON, **kw}).check()
    emu = Emulator(cfg, model=tiny_mlp(), progress=False)
    init = {s: [p.detach().clone() for p in emu.rts[(0, s)].params] for s in range(S)}
    ref = MuonRef(emu, init)
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


@pytest.mark.parametrize("schedule,kw", [
    ("pipedream", {}),
    ("2bw", {"weight_decay": 0.1}),
    ("stale", {"muon_momentum": 0.8, "muon_ns_steps": 3, "lr_schedule": "cosine"}),
])
def test_emulator_equals_the_muon_reference(schedule, kw):
    _run(schedule, **kw)


def test_muon_changes_the_trajectory():
    """Control: the reference is not vacuous (Muon differs from AdamW everywhere)."""
    muon = _run("pipedream")[0].state.losses
    cfg = dict(MUON, optimizer="adamw")
    adamw = Emulator(TrainConfig(model="tiny", dataset="synthetic", schedule="pipedream", stages=S,
                                 iterations=10, batch_size=8, dtype="float64", num_classes=CLASSES,
                                 synthetic_size=64, **cfg).check(),
                     model=tiny_mlp(), progress=False).run()["losses"]
    assert muon != adamw


def test_split_hidden_matrices_only():
    model = tiny_mlp()
    stages = list(model.children())
    # stage 0 and 1: [W, b] with W hidden; the last stage holds the output layer
    assert muon_mask(stages[0], output_stage=False) == [True, False]
    assert muon_mask(stages[2], output_stage=True) == [False, False]
    whole = muon_mask(model, output_stage=True)
    assert whole == [True, False, True, False, False, False]
    head = torch.nn.Linear(6, 3)
    assert muon_mask(stages[1], output_stage=False, head=head) == [True, False, False, False]
    emb = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Conv2d(1, 2, 3), torch.nn.Linear(4, 4),
                              torch.nn.LayerNorm(4), torch.nn.Linear(4, 5))
    assert muon_mask(emb, output_stage=True) == [False, False, False, True, False, False, False, False, False]


def test_float32_step_is_torchs_muon_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    w0 = torch.randn(7, 5, generator=g)
    grads = [torch.randn(7, 5, generator=g) for _ in range(3)]
    a = torch.nn.Parameter(w0.clone())
    b = torch.nn.Parameter(w0.clone())
    ours = StageMuon([a], lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5)
    theirs = torch.optim.Muon([b], lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5)
    for gr in grads:
        a.grad, b.grad = gr.clone(), gr.clone()
        ours.step()
        theirs.step()
    assert torch.equal(a, b)
    assert not torch.equal(a, w0)
    assert torch.equal(ours.state[a]["momentum_buffer"], theirs.state[b]["momentum_buffer"])


def test_newton_schulz_in_bfloat16_is_torchs():
    from torch.optim._muon import _zeropower_via_newtonschulz

    u = torch.randn(9, 4, generator=torch.Generator().manual_seed(2))
    want = _zeropower_via_newtonschulz(u, NS_COEFFICIENTS, 5, 1e-7)
    assert torch.equal(newton_schulz(u, 5, dtype=torch.bfloat16), want)
    # and in float64 it is the reference's iteration
    u64 = u.double()
    torch.testing.assert_close(newton_schulz(u64, 5, dtype=torch.float64), _ns(u64, 5), rtol=1e-13, atol=1e-14)


def test_state_bytes_one_tensor_per_matrix():
    cfg = TrainConfig(model="tiny", dataset="synthetic", optimizer="muon", num_classes=CLASSES, iterations=1).check()
    assert state_copies(cfg, muon=True) == 1 and state_copies(cfg) == 2
    model = tiny_mlp()
    stage = list(model.children())[0]
    params = list(stage.parameters())
    opt = StageOptimizer(params, cfg, muon_mask=muon_mask(stage, output_stage=False))
    assert opt.state_nbytes() == (6 * 4 + 2 * 6) * 4  # W: one buffer, b: AdamW's two moments
    opt.step([torch.ones_like(p) for p in params], 0.01)
    held = sum(v.untyped_storage().nbytes() for st in opt.torch.state.values()
               for v in st.values() if isinstance(v, torch.Tensor) and v.numel() > 1)
    assert held == opt.state_nbytes()


@pytest.mark.parametrize("kw,field", [
    ({"muon_momentum": 1.0}, "muon_momentum"),
    ({"muon_momentum": -0.1}, "muon_momentum"),
    ({"muon_ns_steps": 0}, "muon_ns_steps"),
    ({"muon_ns_steps": 100}, "muon_ns_steps"),
    ({"muon_lr": 0.0}, "muon_lr"),
    ({"weight_prediction": True, "schedule": "stale", "stages": 2}, "weight_prediction"),
    ({"nesterov_lookahead": True, "schedule": "stale", "stages": 2}, "nesterov_lookahead"),
    ({"nesterov": True}, "nesterov"),
    ({"spike_compensation": True, "schedule": "stale", "stages": 2}, "spike_compensation"),
])
def test_bad_muon_settings_are_one_line_errors(kw, field):
    with pytest.raises(StalesimError) as e:
        TrainConfig(model="lenet5", dataset="synthetic", iterations=1, **{"optimizer": "muon", **kw}).check()
    msg = str(e.value)
    assert msg.startswith(f"{field}:") and "\n" not in msg


@pytest.mark.parametrize("command", ["emulate", "study", "run"])
@pytest.mark.parametrize("flags,field", [
    (["--weight-prediction"], "weight_prediction"),
    (["--nesterov-lookahead"], "nesterov_lookahead"),
    (["--muon-momentum", "1"], "muon_momentum"),
])
def test_cli_refuses_bad_muon_combinations_in_one_line(command, flags, field, tmp_path):
    from test_cli_fuzz import run_cli

    argv = [command, "--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
            "--iterations", "2", "--optimizer", "muon", *flags]
    if command == "study":
        argv = [command, "--model", "lenet5", "--dataset", "synthetic", "--schedules", "stale",
                "--iterations", "2", "--optimizer", "muon", "--out", str(tmp_path / "s"), *flags]
    code, _, err, _ = run_cli(argv)
    assert code == 2, err
    assert err.startswith(f"stalesim: error: {field}:") and err.count("\n") == 1, err
