"""Iterations to target, seed intervals, out-of-reach, and the emulation store (reuse)."""

from __future__ import annotations

import math

import pytest

from stalesim.plan.convergence import (
    EmulationStore,
    Target,
    iterations_to_accuracy,
    iterations_to_loss,
    judge,
    out_of_reach,
    seed_interval,
    t975,
)
from stalesim.runtime.config import TrainConfig


def test_iterations_to_loss_uses_the_trailing_mean() -> None:
    losses = [3.0, 2.0, 1.0, 3.0, 1.0, 1.0]
    assert iterations_to_loss(losses, 1.0, 1) == 3  # first single loss <= 1
    assert iterations_to_loss(losses, 1.5, 2) == 3  # pair means 2.5, 1.5: met at the 3rd
    assert iterations_to_loss(losses, 1.2, 2) == 6  # 2.5, 1.5, 2, 2, 1
    assert iterations_to_loss(losses, 0.5, 2) is None
    assert iterations_to_loss([2.0, math.nan, 0.0], 1.0, 1) is None  # divergence ends the search


def test_iterations_to_accuracy_counts_whole_epochs() -> None:
    ms = [{"epoch": 0, "test_accuracy": 0.5}, {"epoch": 1, "test_accuracy": 0.91}, {"epoch": None}]
    assert iterations_to_accuracy(ms, 100, 0.9) == 200
    assert iterations_to_accuracy(ms, 100, 0.95) is None


def test_seed_interval_t_and_range() -> None:
    assert t975(1) == pytest.approx(12.706) and t975(11) == pytest.approx(2.228) and t975(500) == 1.96
    iv = seed_interval([100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200])
    half = 2.228 * 33.166247903554 / math.sqrt(11)
    assert iv.mean == pytest.approx(150) and iv.lo == pytest.approx(150 - half) and iv.hi == pytest.approx(150 + half)
    two = seed_interval([100, 140])  # t = 12.7: clipped to the seeds' range
    assert (two.lo, two.mean, two.hi) == (100, 120, 140)
    one = seed_interval([42])
    assert (one.lo, one.hi, one.n) == (42, 42, 1)


def test_out_of_reach_and_judge() -> None:
    flat = [2.0 + 0.01 * (-1) ** i for i in range(40)]
    assert out_of_reach(flat, 1.0, 10_000)
    falling = [3.0 - 0.01 * i for i in range(40)]  # reaches 1.0 around iteration 200
    assert not out_of_reach(falling, 1.0, 1000) and out_of_reach(falling, 1.0, 100)
    c = judge([{"losses": falling, "iterations": 40}], Target("loss", 2.805, smooth=1), 1000)
    assert c.status == "reached" and c.per_seed == [21]
    c = judge([{"losses": falling, "iterations": 40}], Target("loss", 1.0, smooth=1), 1000)
    assert c.status == "not reached"
    c = judge([{"losses": [1.0, None], "diverged": True}], Target("loss", 0.1), 1000)
    assert c.status == "diverged"


def test_store_reuses_exact_and_longer_runs(tmp_path) -> None:
    store = EmulationStore(tmp_path)
    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=2, iterations=8)
    calls = []

    def run(todo):
        calls.append([rid for rid, _ in todo])
        return [{"run_id": rid, "losses": [float(i) for i in range(c.iterations)], "iterations": c.iterations,
                 "batches_per_epoch": 4} for rid, c in todo]

    from dataclasses import replace

    store.fetch([cfg], run)
    assert store.ran == 1
    store2 = EmulationStore(tmp_path)  # another plan (other hardware): nothing runs
    got = store2.fetch([cfg, replace(cfg, iterations=4)], run)
    assert store2.ran == 0 and store2.reused == 2 and len(calls) == 1
    assert list(got.values())[1]["losses"] == [0.0, 1.0, 2.0, 3.0]  # the longer run cut to 4
    store2.fetch([replace(cfg, seed=1)], run)  # the seed is part of the key
    assert store2.ran == 1 and len(calls) == 2
    cos = replace(cfg, lr_schedule="cosine", iterations=4)  # the lr depends on the length: no cut
    assert store2.get(cos) is None


def test_runs_without_losses_are_not_extended() -> None:
    c = judge([{"iterations": 10}, {"iterations": 10, "losses": []}], Target("loss", 1.0), 1000)
    assert c.status == "no result" and not c.reached
