"""Continued candidates (stalesim.plan.continuation): a run paused at H and continued to 2H
gives, loss for loss, the runs of H and of 2H iterations from scratch; the settings that tie
a run to its length are refused with their reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stalesim.emulator.replay import Emulator
from stalesim.errors import StalesimError
from stalesim.plan.continuation import continuable, continue_one, last_horizon
from stalesim.runtime.config import TrainConfig

H = 6  # the first horizon; the continued run is 4 H long, checkpointed every H


def _cfg(schedule: str, iterations: int, **kw: object) -> TrainConfig:
    stages = 1 if schedule == "sequential" else 2
    return TrainConfig(model="lenet5", dataset="synthetic", synthetic_size=64, batch_size=8, lr=0.05,
                       schedule=schedule, stages=stages, seed=3, iterations=iterations, **kw).check()


def _from_scratch(cfg: TrainConfig) -> list[float]:
    return Emulator(cfg, progress=False).run()["losses"]


# pipedream: stale weights, a version stash and forwards in flight at every batch boundary;
# 1f1b: micro-batches flushed per batch (the plan's synchronous emulation)
@pytest.mark.parametrize("schedule, kw", [("pipedream", {}), ("1f1b", {"microbatches": 2})])
def test_continued_run_equals_runs_from_scratch(tmp_path: Path, schedule: str, kw: dict) -> None:
    short, double = _cfg(schedule, H, **kw), _cfg(schedule, 2 * H, **kw)
    long = replace(short, iterations=4 * H).to_dict()
    folder = str(tmp_path / "run")
    first = continue_one("a", long, short.to_dict(), folder, 1, H, H)
    second = continue_one("b", long, double.to_dict(), folder, 1, 2 * H, H)
    assert first["losses"] == _from_scratch(short)  # element by element, bitwise (float32)
    assert second["losses"] == _from_scratch(double)
    assert (first["iterations"], second["iterations"]) == (H, 2 * H)
    # the work: H new batches each time, the second from the first's checkpoint
    assert (first["continued_from"], first["emulated_batches"]) == (0, H)
    assert (second["continued_from"], second["emulated_batches"]) == (H, H)
    assert second["config"] == double.to_dict() and second["run_id"] == "b"
    assert first["final_test_accuracy"] is None  # a paused run is not evaluated at its pause
    # a shorter horizon asked of a folder already further on: its first H losses, nothing run
    again = continue_one("c", long, short.to_dict(), folder, 1, H, H)
    assert again["losses"] == first["losses"] and again["emulated_batches"] == 0


def test_a_checkpoint_of_other_settings_is_not_resumed(tmp_path: Path) -> None:
    folder = str(tmp_path / "run")
    cfg = _cfg("pipedream", H)
    continue_one("a", replace(cfg, iterations=4 * H, lr=0.1).to_dict(), cfg.to_dict(), folder, 1, H, H)
    res = continue_one("b", replace(cfg, iterations=4 * H).to_dict(), cfg.to_dict(), folder, 1, H, H)
    assert res["continued_from"] == 0 and res["losses"] == _from_scratch(cfg)


def test_a_pause_between_checkpoints_reports_its_own_length(tmp_path: Path) -> None:
    # it pauses at the next checkpoint (the epoch's end at 8: 64 samples, 8 a batch) and
    # reports the first H + 1 losses; the continuation resumes from there, as it resumes a
    # plan killed between two checkpoints
    cfg = _cfg("pipedream", H + 1)
    long = replace(cfg, iterations=4 * H).to_dict()
    res = continue_one("a", long, cfg.to_dict(), str(tmp_path / "r"), 1, H + 1, H)
    assert res["losses"] == _from_scratch(cfg) and res["iterations"] == H + 1
    nxt = continue_one("b", long, _cfg("pipedream", 2 * H).to_dict(), str(tmp_path / "r"), 1, 2 * H, H)
    assert (nxt["continued_from"], nxt["emulated_batches"]) == (8, 2 * H - 8)
    assert nxt["losses"] == _from_scratch(_cfg("pipedream", 2 * H))


def test_a_pause_without_a_checkpoint_after_it_is_refused() -> None:
    emu = Emulator(_cfg("pipedream", 4 * H), progress=False)  # no run folder: no checkpoints
    emu.stop_after = H
    with pytest.raises(StalesimError, match="stop_after: no checkpoint at or after batch 6"):
        emu.check_stop()


@pytest.mark.parametrize("kw, batched, reason", [
    ({}, False, ""),
    ({"lr_schedule": "cosine"}, False, "the learning rate (cosine) is scheduled over the run's length"),
    ({"lr_schedule": "step"}, False, "the learning rate (step) is scheduled over the run's length"),
    ({"lr_warmup": 3}, False, ""),  # a warm-up of fixed length, then constant: not length-bound
    ({}, True, "batched search runs are grouped and run by the study, from scratch"),
    ({"iterations": None, "epochs": 2}, False, "horizons in epochs: a paused run is not evaluated at its pause"),
])
def test_continuable_and_its_reason(kw: dict, batched: bool, reason: str) -> None:
    cfg = replace(_cfg("pipedream", H), **kw)
    assert continuable(cfg, batched=batched) == (not reason, reason)


def test_a_hybrid_without_its_switch_point_is_not_continuable() -> None:
    cfg = TrainConfig(model="lenet5", dataset="synthetic", synthetic_size=64, batch_size=8, schedule="hybrid",
                      stages=2, iterations=H)
    assert continuable(cfg) == (False, "the switch point defaults to half the run's length")
    assert continuable(replace(cfg, switch=2))[0]


@pytest.mark.parametrize("first, most, last", [(100, 800, 800), (100, 799, 400), (100, 100, 100), (3, 20, 12)])
def test_last_horizon(first: int, most: int, last: int) -> None:
    assert last_horizon(first, most) == last
