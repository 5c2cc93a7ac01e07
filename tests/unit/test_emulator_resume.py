"""Checkpoint/resume is exact: a resumed run gives bitwise the same losses and weights."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig
from stalesim.workloads.zoo import LayeredModel


def tiny_bn_net(seed: int = 0) -> LayeredModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = [
            ("c1", nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())),
            ("c2", nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())),
            ("fc", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))),
        ]
        return LayeredModel(blocks, name="tinybn", input_shape=(1, 6, 6), default_dataset="synthetic")


class Interrupt(Exception):
    pass


def _cfg(name: str, **kw) -> TrainConfig:
    base = dict(model="tinybn", dataset="synthetic", schedule=name, stages=3, iterations=12,
                batch_size=8, lr=0.05, momentum=0.9, num_classes=3, synthetic_size=32)
    if name in ("dp", "pipe-sgd"):
        base.update(stages=1, workers=2)
    base.update(kw)
    return TrainConfig(**base)


def _weights(emu: Emulator) -> list[torch.Tensor]:
    return [t.detach().clone() for m in emu.models for t in m.state_dict().values()]


CASES = [
    ("stale", {}),
    ("pipedream", {}),
    ("2bw", {"microbatches": 2}),
    ("local", {}),
    ("pipe-sgd", {"compression": "int8"}),
    ("stale", {"weight_prediction": True, "pipemare_correction": True}),
    ("pipedream", {"weight_prediction": True}),  # the backward reuses the forward's prediction
    # split backward (flushed per batch, so a checkpoint never falls between an I and its W;
    # that case is tested on the runtime, test_runtime_split_backward)
    ("zb-h1", {"microbatches": 2}),
    ("zb-h2", {"microbatches": 4}),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{'-' + '-'.join(kw) if kw else ''}" for n, kw in CASES])
def test_resume_is_bitwise_identical(tmp_path, name, kw):
    cfg = _cfg(name, **kw)
    full = Emulator(cfg, model=tiny_bn_net(), progress=False)
    ref = full.run()
    ref_w = _weights(full)

    run_dir = tmp_path / "run"
    first = Emulator(cfg, model=tiny_bn_net(), out=run_dir, checkpoint_every=5, progress=False)
    orig_step = first._step
    calls = {"n": 0}
    stop_at = len(first.steps) * 2 // 3  # well after the checkpoint at step 5, mid-pipeline

    def step(a):
        calls["n"] += 1
        if calls["n"] > stop_at:
            raise Interrupt
        orig_step(a)

    first._step = step
    with pytest.raises(Interrupt):
        first.run()
    assert (run_dir / "checkpoint.pt").is_file()

    second = Emulator(cfg, model=tiny_bn_net(), out=run_dir, checkpoint_every=5, progress=False)
    res = second.run(resume=True)
    assert res["losses"] == ref["losses"]  # bitwise
    for a, b in zip(_weights(second), ref_w):
        assert torch.equal(a, b)
    assert res["versions_match_ir"]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if "step" in json.loads(line)]
    assert steps == sorted(set(steps)) and len(steps) == cfg.iterations
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["losses"] == ref["losses"]


def test_resume_refuses_a_different_config(tmp_path):
    from stalesim.errors import StalesimError

    cfg = _cfg("stale")
    Emulator(cfg, model=tiny_bn_net(), out=tmp_path, checkpoint_every=4, progress=False).run()
    other = _cfg("stale", lr=0.1)
    with pytest.raises(StalesimError, match="^resume: lr"):
        Emulator(other, model=tiny_bn_net(), out=tmp_path, checkpoint_every=4, progress=False).run(resume=True)


def test_divergence_stops_cleanly(tmp_path):
    cfg = _cfg("stale", lr=1e8, momentum=0.0, iterations=30)
    res = Emulator(cfg, model=tiny_bn_net(), out=tmp_path, progress=False).run()
    assert res["diverged"] is True
    k = res["diverged_at"]
    assert k is not None and k < 30 and res["steps_done"] == k + 1
    assert res["losses"][-1] is None
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["diverged"] is True and saved["diverged_at"] == k
