"""Checkpoint / resume with ``--optimizer muon`` is bitwise exact (Muon's momentum buffers
and AdamW's moments travel in the runtime's checkpoint), under stashing, 2BW and a
split-backward schedule; and the replay reads nothing on the host per action."""

from __future__ import annotations

import pytest
import torch
from test_emulator_exactness import CLASSES, tiny_mlp
from test_emulator_resume import Interrupt

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.muon import MuonAdamW


def _cfg(name: str, **kw) -> TrainConfig:
    d = dict(model="tiny", dataset="synthetic", schedule=name, stages=3, iterations=12,  # noqa: C408
             batch_size=8, optimizer="muon", lr=0.01, muon_lr=0.05, weight_decay=0.01,
             num_classes=CLASSES, synthetic_size=32)
    d.update(kw)
    return TrainConfig(**d).check()


def _weights(emu: Emulator) -> list[torch.Tensor]:
    return [t.detach().clone() for m in emu.models for t in m.state_dict().values()]


@pytest.mark.parametrize("name,kw", [("pipedream", {}), ("2bw", {"microbatches": 2}),
                                     ("zb-h1", {"microbatches": 2}), ("stale", {"error_feedback": True})])
def test_muon_resume_is_bitwise_identical(tmp_path, name, kw):
    cfg = _cfg(name, **kw)
    full = Emulator(cfg, model=tiny_mlp(), progress=False)
    ref = full.run()
    opt = full.rts[(0, 0)].opt.torch
    assert isinstance(opt, MuonAdamW) and opt.muon is not None
    assert all(st["momentum_buffer"].abs().sum() > 0 for st in opt.muon.state.values())

    run_dir = tmp_path / "run"
    first = Emulator(cfg, model=tiny_mlp(), out=run_dir, checkpoint_every=5, progress=False)
    orig = first._step
    calls = {"n": 0}
    stop_at = len(first.steps) * 2 // 3

    def step(a):
        calls["n"] += 1
        if calls["n"] > stop_at:
            raise Interrupt
        orig(a)

    first._step = step
    with pytest.raises(Interrupt):
        first.run()
    second = Emulator(cfg, model=tiny_mlp(), out=run_dir, checkpoint_every=5, progress=False)
    res = second.run(resume=True)
    assert res["losses"] == ref["losses"]
    for a, b in zip(_weights(second), _weights(full)):
        assert torch.equal(a, b)
    assert res["versions_match_ir"]


def test_executor_resume_with_muon_is_exact(tmp_path):
    """The executor's per-rank checkpoint carries Muon's state too: a resumed 2-rank run
    gives the uninterrupted run's losses, which are the emulator's."""
    from stalesim.executor import make_job, run_local

    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="2bw", microbatches=2, stages=2,
                      iterations=9, batch_size=16, synthetic_size=128, optimizer="muon", lr=0.01,
                      weight_decay=0.01).check()
    out = str(tmp_path / "run")
    full = run_local(make_job(cfg, out=out, checkpoint_every=4, evaluate=False), "cpu:2", timeout_s=60)
    resumed = run_local(make_job(cfg, out=out, checkpoint_every=4, resume=out, evaluate=False),
                        "cpu:2", timeout_s=60)
    assert resumed["losses"] == full["losses"]
    torch.set_num_threads(1)
    assert full["losses"] == Emulator(cfg, progress=False).run()["losses"]
