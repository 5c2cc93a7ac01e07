"""Exactness proof: the emulator equals a deliberately simple reference, for every schedule.

The reference below shares nothing with the emulator but the data order and the
version table. It keeps an explicit dict of every weight version of every stage
(and the SGD momentum that goes with it), computes each forward with version
v_F(s,t), each backward by hand-written matrix math with weights v_B(s,t) and the
forward's saved activations, sums the per-batch gradients (micro-batches, mean
over workers) and applies update u(s,t) literally from the table. It is
dependency-driven (memoized recursion over "version n of stage s"), so it needs
no execution order at all: if the emulator read any other version anywhere, the
trajectories would differ.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
from torch import nn

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import get_spec, schedule_names
from stalesim.workloads.zoo import LayeredModel

S, D_IN, WIDTH, CLASSES = 3, 4, 6, 3


def tiny_mlp(seed: int = 0) -> LayeredModel:
    g = torch.Generator().manual_seed(seed)
    blocks = [
        ("l0", nn.Sequential(nn.Flatten(), nn.Linear(D_IN, WIDTH), nn.Tanh())),
        ("l1", nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())),
        ("l2", nn.Sequential(nn.Linear(WIDTH, CLASSES))),
    ]
    model = LayeredModel(blocks, name="tiny", input_shape=(1, 1, D_IN), default_dataset="synthetic")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7)
    return model


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


class Reference:
    """Explicit-version SGD(momentum, weight decay) on the tiny MLP, from the version table."""

    def __init__(self, emu: Emulator, init: dict[int, list[torch.Tensor]]):
        self.table = emu.sched.versions
        self.cfg = emu.cfg
        self.stream = emu.stream
        self.local = emu.sched.local_loss
        self.P, self.M = emu.P, emu.M
        self.micros = emu.sched.micro_indices()
        self.init = init  # stage -> [W, b] (+ [Hw, Hb] for local heads)
        self.by_update = {(w, s, n): t for (w, s, t), n in self.table.upd.items()}
        self.version = cache(self._version)
        self.grad = cache(self._grad)
        self.fwd = cache(self._fwd)
        self.bwd = cache(self._bwd)

    # ---------------------------------------------------------------- data
    def data(self, t: int, w: int, m: int | None):
        x, y = self.stream(t)
        n = x.shape[0] // self.P
        x, y = x[w * n:(w + 1) * n], y[w * n:(w + 1) * n]
        if m is not None and self.M > 1:
            k = x.shape[0] // self.M
            x, y = x[m * k:(m + 1) * k], y[m * k:(m + 1) * k]
        return x.reshape(x.shape[0], -1).double(), y

    # ------------------------------------------------------------ versions
    def _version(self, s: int, n: int):
        """(params, momentum) of stage s after n updates (worker 0; all workers agree)."""
        if n == 0:
            return tuple(self.init[s]), None
        t = self.by_update[(0, s, n)]
        params, mom = self.version(s, n - 1)
        g = self.grad(s, t)
        lr, mu, wd = self.cfg.lr_at(t, self.cfg.total_iterations(self.stream.batches_per_epoch)), \
            self.cfg.momentum, self.cfg.weight_decay
        d = [gi + wd * p for gi, p in zip(g, params)]
        new_mom = tuple(d) if mom is None else tuple(mu * v + di for v, di in zip(mom, d))
        new = tuple(p - lr * v for p, v in zip(params, new_mom))
        return new, new_mom

    def weights(self, s: int, n: int):
        return self.version(s, n)[0]

    # ------------------------------------------------------------- forward
    def _fwd(self, s: int, t: int, m, w: int):
        """(stage input h, stage output a, head logits or None) with v_F weights."""
        if s == 0:
            h = self.data(t, w, m)[0]
        else:
            h = self.fwd(s - 1, t, m, w)[1]
        p = self.weights(s, self.table.v_f(s, t, m, w))
        z = h @ p[0].T + p[1]
        if s == S - 1:
            return h, z, None
        a = torch.tanh(z)
        logits = a @ p[2].T + p[3] if self.local else None
        return h, a, logits

    def dloss(self, logits, y):
        n = logits.shape[0]
        sm = torch.softmax(logits, 1)
        sm[torch.arange(n), y] -= 1
        return sm / n / self.M

    def loss(self, logits, y) -> float:
        return float(nn.functional.cross_entropy(logits, y)) / self.M

    # ------------------------------------------------------------ backward
    def _bwd(self, s: int, t: int, m, w: int):
        """(weight grads, input grad) of B(s,t,m) with v_B weights and saved activations."""
        h, a, logits = self.fwd(s, t, m, w)
        p = self.weights(s, self.table.v_b(s, t, m, w))
        y = self.data(t, w, m)[1]
        head = []
        if s == S - 1:
            gz = self.dloss(a, y)
        else:
            if self.local:
                gl = self.dloss(logits, y)
                head = [gl.T @ a, gl.sum(0)]
                ga = gl @ p[2]
            else:
                ga = self.bwd(s + 1, t, m, w)[1]
            gz = ga * (1 - a * a)
        gW, gb = gz.T @ h, gz.sum(0)
        gh = gz @ p[0]
        return [gW, gb, *head], gh

    def _grad(self, s: int, t: int):
        total = None
        for w in range(self.P):
            for m in self.micros:
                g = self.bwd(s, t, m, w)[0]
                total = list(g) if total is None else [a + b for a, b in zip(total, g)]
        return tuple(x / self.P for x in total)

    def losses(self, n: int) -> list[float]:
        out = []
        for t in range(n):
            tot = 0.0
            for w in range(self.P):
                for m in self.micros:
                    logits = self.fwd(S - 1, t, m, w)[1]
                    tot += self.loss(logits, self.data(t, w, m)[1]) / self.P
            out.append(tot)
        return out


def _case(name: str) -> dict | None:
    """The flags that put ``name`` on the 3-block MLP (S = 3); None where it cannot be:
    ZB-V and DualPipeV place exactly 2 stages per device (S even); they train exactly like
    gpipe (tests/unit/test_emulator_virtual.py), which this reference checks."""
    spec = get_spec(name)
    if spec.data_parallel:
        return {"workers": 2}
    extra: dict = {"microbatches": 2} if spec.uses_micro else {}
    if S % spec.stages_per_device:
        if spec.fixed_stages_per_device:
            return None
        extra["stages_per_device"] = S  # one device running the three stages as its chunks
    return extra


CASES = [(n, e) for n in schedule_names() if (e := _case(n)) is not None] + [
    ("pipe-sgd", {"workers": 2, "warmup": 2}),
    ("stale", {"weight_decay": 0.01}),
    ("pipedream", {"warmup": 2}),
    ("interleaved-1f1b", {"microbatches": 2, "stages_per_device": 1}),  # 3 devices, one chunk each
    ("interleaved-2bw", {"microbatches": 4, "stages_per_device": 1, "warmup": 2}),
]


def _setup(name: str, extra: dict, N: int = 10):
    stages = 1 if name in ("dp", "pipe-sgd") else S
    cfg = TrainConfig(model="tiny", dataset="synthetic", schedule=name, stages=stages,
                      iterations=N, batch_size=8, lr=0.2, momentum=0.6, dtype="float64",
                      num_classes=CLASSES, synthetic_size=64, **extra)
    model = tiny_mlp()
    emu = Emulator(cfg, model=model, progress=False)
    init = {}
    for s_idx in range(S):
        mods = [m for row in emu.stage_mods[:1] for m in row]
        if stages == 1:
            lin = linears(mods[0])[s_idx]
            init[s_idx] = [lin.weight.detach().clone(), lin.bias.detach().clone()]
        else:
            rt = emu.rts[(0, s_idx)]
            init[s_idx] = [p.detach().clone() for p in rt.params]
    return cfg, emu, init


def _final_weights(emu: Emulator, stages: int) -> dict[int, list[torch.Tensor]]:
    if stages == 1:
        lins = linears(emu.stage_mods[0][0])
        return {s: [lins[s].weight.detach(), lins[s].bias.detach()] for s in range(S)}
    return {s: [p.detach() for p in emu.rts[(0, s)].params] for s in range(S)}


class FlatRef(Reference):
    """dp / pipe-sgd run the whole MLP as one stage: the reference still walks 3 layers
    but every layer reads the versions of schedule stage 0."""

    def __init__(self, emu, init):
        super().__init__(emu, init)
        self.layer_table = self.table

        class T:  # map layer s -> schedule stage 0
            def __init__(s_, tab):
                s_.tab = tab

            def v_f(s_, s, t, m, w):
                return s_.tab.v_f(0, t, m, w)

            def v_b(s_, s, t, m, w):
                return s_.tab.v_b(0, t, m, w)

        self.table = T(self.layer_table)
        self.by_update = {(w, s, n): t for (w, _s, t), n in self.layer_table.upd.items() for s in range(S)}


@pytest.mark.parametrize("name,extra", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in e.items())}" for n, e in CASES])
def test_emulator_equals_reference(name, extra):
    N = 10
    cfg, emu, init = _setup(name, extra, N)
    stages = emu.S
    ref = (FlatRef if stages == 1 else Reference)(emu, init)
    summary = emu.run()
    assert not summary["diverged"]
    assert summary["versions_match_ir"] is True
    # versions logged == IR table, action by action
    table = emu.sched.versions
    n_f = sum(1 for rec in emu.versions_log() if "F" in rec["action"] and "U" not in rec["action"])
    assert n_f == len(table.vf)
    want = ref.losses(N)
    torch.testing.assert_close(torch.tensor(summary["losses"]), torch.tensor(want), rtol=1e-10, atol=1e-12)
    final = _final_weights(emu, stages)
    last = {s: max(n for (w, ss, _t), n in ref.layer_table.upd.items() if ss == (0 if stages == 1 else s))
            for s in range(S)} if stages == 1 else \
        {s: max(n for (w, ss, _t), n in table.upd.items() if ss == s) for s in range(S)}
    for s in range(S):
        for got, exp in zip(final[s], ref.weights(s, last[s])):
            torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-12)


def test_reference_is_sensitive_to_versions():
    """Reading v_F in the backward of the stale schedule (i.e. a wrong v_B) changes the result."""
    cfg, emu, init = _setup("stale", {}, 10)
    ref = Reference(emu, init)
    emu.run()

    class Wrong(Reference):
        def _bwd(self, s, t, m, w):
            saved = self.table.v_b
            self.table.v_b = self.table.v_f
            try:
                return super()._bwd(s, t, m, w)
            finally:
                self.table.v_b = saved

    wrong = Wrong(emu, init)
    assert not torch.allclose(torch.tensor(wrong.losses(10)), torch.tensor(ref.losses(10)), rtol=1e-6)
