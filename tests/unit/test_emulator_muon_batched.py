"""``--optimizer muon`` batched (K runs stacked, one Newton-Schulz per run's matrix) equals
the K separate runs: float64 to 1e-10 relative, float32 within torch's bfloat16 iteration
(separate runs use ``torch.optim.Muon`` itself)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_emulator_batched import TINY, _compare

from stalesim.runtime.config import TrainConfig


def _muon(model: str, schedule: str, dtype: str = "float64", **kw) -> list[TrainConfig]:
    d = dict(dataset="synthetic", synthetic_size=32, batch_size=8, optimizer="muon",  # noqa: C408
             lr=3e-3, muon_lr=0.02, weight_decay=0.1, schedule=schedule, stages=3, iterations=4, dtype=dtype)
    d["model"] = model if model == "lenet5" else TINY
    if model != "lenet5":
        d["eval_windows"] = 8
    if schedule == "2bw":
        d["microbatches"] = 2
    d.update(kw)
    base = TrainConfig(**d).check()
    return [replace(base, seed=0).check(),
            replace(base, seed=1, muon_lr=0.01, muon_momentum=0.9, weight_decay=1e-3).check(),
            replace(base, seed=2, error_feedback=True).check()]


@pytest.mark.parametrize("model", ["lenet5", "gpt"])
@pytest.mark.parametrize("schedule", ["pipedream", "2bw"])
def test_float64_muon_batched_equals_separate_runs(model, schedule):
    _compare(_muon(model, schedule), 1e-10)


def test_float32_muon_batched_within_bfloat16_tolerance():
    _compare(_muon("gpt", "stale", dtype="float32"), 2e-2)


def test_virtual_stage_schedule_batched():
    _compare(_muon("lenet5", "zb-v", stages=4, microbatches=4, batch_size=16, iterations=3), 1e-10)
