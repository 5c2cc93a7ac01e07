"""Batched emulation: K runs of one shape as one emulator equal K separate runs.

Tolerances: float64 per-run losses equal the separate runs' to 1e-10 relative (round-off
of the same formulas; observed about 4e-16). float32: the batched kernels (``bmm``,
stacked layer norm, ...) sum in another order than single-run kernels; over the few
steps here the per-run losses agree to 1e-5 relative (observed about 2e-7), and the
gap grows with training like any float32 reassociation.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from stalesim.emulator.batched import BatchedEmulator
from stalesim.emulator.replay import Emulator
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _base(model: str, schedule: str, dtype: str = "float64", **kw) -> TrainConfig:
    stages = 1 if schedule == "sequential" else 3
    if model == "lenet5":
        d = dict(model="lenet5", dataset="synthetic", synthetic_size=32, batch_size=8,  # noqa: C408
                 optimizer="sgd", lr=0.02, momentum=0.9)
    else:
        d = dict(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8,  # noqa: C408
                 optimizer="adamw", lr=3e-3, weight_decay=0.1, eval_windows=8)
    d.update(schedule=schedule, stages=stages, iterations=4, dtype=dtype)
    if schedule == "2bw":
        d["microbatches"] = 2
    d.update(kw)
    return TrainConfig(**d).check()


def _variants(base: TrainConfig) -> list[TrainConfig]:
    """Three runs differing in seed, learning rate, weight decay and a mitigation."""
    mit = {} if base.schedule == "sequential" else (
        {"weight_prediction": True} if base.optimizer == "sgd" else {"error_feedback": True})
    return [replace(base, seed=0).check(),
            replace(base, seed=1, lr=base.lr * 0.5, weight_decay=1e-3).check(),
            replace(base, seed=2, **mit).check()]


def _compare(cfgs, rel, **kw):
    singles = [Emulator(c, progress=False).run() for c in cfgs]
    batched = BatchedEmulator(cfgs, progress=False, **kw).run()
    assert len(batched) == len(cfgs)
    for s, b in zip(singles, batched):
        assert len(b["losses"]) == len(s["losses"]) == cfgs[0].iterations
        for x, y in zip(s["losses"], b["losses"]):
            assert math.isfinite(y) and abs(x - y) <= rel * abs(x), (x, y)
        for key in ("final_val_loss", "final_test_accuracy"):
            if s[key] is not None:
                assert b[key] == pytest.approx(s[key], rel=rel, abs=1e-12 if key == "final_val_loss" else 0.02)
        assert b["staleness_ir"] == s["staleness_ir"] and b["batched"] == len(cfgs)
    # the runs really differ (seed / lr / mitigation), so equality is not trivial
    assert len({b["losses"][-1] for b in batched}) == len(cfgs)
    return singles, batched


@pytest.mark.parametrize("model", ["lenet5", "gpt"])
@pytest.mark.parametrize("schedule", ["sequential", "stale", "pipedream", "2bw"])
def test_float64_per_run_losses_equal_separate_runs(model, schedule):
    _compare(_variants(_base(model, schedule)), 1e-10)


@pytest.mark.parametrize("model,schedule", [("lenet5", "stale"), ("gpt", "2bw"), ("gpt", "pipedream")])
def test_float32_within_reassociation_tolerance(model, schedule):
    _compare(_variants(_base(model, schedule, "float32")), 1e-5)


def test_vmap_path_equals_folded_path():
    cfgs = _variants(_base("gpt", "2bw", nesterov_lookahead=False))
    a = BatchedEmulator(cfgs, progress=False).run()
    b = BatchedEmulator(cfgs, progress=False, generic=True).run()
    for x, y in zip(a, b):
        assert x["losses"] == pytest.approx(y["losses"], rel=1e-12)


def test_sgd_mitigations_per_run_in_one_batch():
    # 6 steps: error feedback's first correction (second delayed update) reaches the last loss
    base = _base("lenet5", "pipedream", iterations=6)
    cfgs = [replace(base, **kw).check() for kw in (
        {"nesterov_lookahead": True}, {"spike_compensation": True, "staleness_lr": True},
        {"pipemare_lr": True, "pipemare_correction": True}, {"error_feedback": True})]
    _compare(cfgs, 1e-10)


def test_run_folders_and_resume_are_exact(tmp_path):
    cfgs = _variants(_base("gpt", "stale"))
    dirs = [tmp_path / f"run{k}" for k in range(3)]
    ref = BatchedEmulator(cfgs, progress=False).run()

    class Interrupt(Exception):
        pass

    first = BatchedEmulator(cfgs, out=tmp_path / "batch", run_dirs=dirs, checkpoint_every=1, progress=False)
    orig, calls = first._step, {"n": 0}
    stop = len(first.steps) * 2 // 3

    def step(a):
        calls["n"] += 1
        if calls["n"] > stop:
            raise Interrupt
        orig(a)

    first._step = step
    with pytest.raises(Interrupt):
        first.run()
    res = BatchedEmulator(cfgs, out=tmp_path / "batch", run_dirs=dirs, checkpoint_every=1,
                          progress=False).run(resume=True)
    for k, (r, f) in enumerate(zip(res, ref)):
        assert r["losses"] == f["losses"] and r["final_val_loss"] == f["final_val_loss"]
        summary = json.loads((dirs[k] / "summary.json").read_text())
        assert summary["seed"] == cfgs[k].seed and summary["batched"] == 3
        steps = [json.loads(x) for x in (dirs[k] / "metrics.jsonl").read_text().splitlines() if '"step"' in x]
        assert [s["step"] for s in steps] == list(range(cfgs[k].iterations))
        assert [s["loss"] for s in steps] == f["losses"]
        assert json.loads((dirs[k] / "config.json").read_text())["train"] == cfgs[k].to_dict()
    assert (tmp_path / "batch" / "batch.json").is_file()


def test_diverged_run_stops_alone():
    base = _base("lenet5", "stale", iterations=6)
    cfgs = [replace(base, seed=0).check(), replace(base, seed=1, lr=1e15).check()]
    a, b = BatchedEmulator(cfgs, progress=False).run()
    assert not a["diverged"] and len(a["losses"]) == 6
    assert b["diverged"] and b["diverged_at"] is not None and len(b["losses"]) == b["diverged_at"] + 1


@pytest.mark.parametrize("cfgs,needle", [
    (lambda b: [b, replace(b, optimizer="adamw", momentum=0.0)], "differ in optimizer"),
    (lambda b: [b, replace(b, schedule="pipedream")], "differ in schedule"),
    (lambda b: [replace(b, model="resnet20", dataset="synthetic")] * 2, "running statistics"),
])
def test_incompatible_runs_are_refused_in_one_line(cfgs, needle):
    with pytest.raises(StalesimError, match=needle) as e:
        BatchedEmulator(cfgs(_base("lenet5", "stale")), progress=False)
    assert "\n" not in str(e.value)


def test_a_batch_that_does_not_fit_is_refused_before_building(monkeypatch):
    import stalesim.runtime.batched.memory as rb

    cfgs = _variants(_base("gpt", "2bw"))
    est = BatchedEmulator.preflight(cfgs)
    assert est["total"] > 0
    monkeypatch.setattr(rb, "available_bytes", lambda device: est["total"] // 2)
    with pytest.raises(StalesimError, match="batched: 3 runs need about") as e:
        BatchedEmulator(cfgs, progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(StalesimError, match="use fewer runs"):
        BatchedEmulator.preflight(cfgs)


def test_cuda_without_gpu_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(StalesimError, match="no CUDA device"):
        BatchedEmulator.preflight([replace(_base("lenet5", "stale"), device="cuda")])


@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zb-h1", "zb-v", "interleaved-2bw"])
def test_virtual_stages_and_split_backward_equal_separate_runs(schedule):
    """Schedules with V stages per device and split backward (I then W) run batched too:
    the replay, version table and I/W hand-offs are the single emulator's."""
    base = _base("lenet5", schedule, stages=4, microbatches=4, batch_size=16, iterations=3)
    _compare(_variants(base), 1e-10)
