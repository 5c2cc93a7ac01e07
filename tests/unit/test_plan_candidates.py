"""The plan's grid: what fits a device count, what is skipped and why, the searched
policies, and which candidates share an emulation."""

from __future__ import annotations

import pytest

from stalesim.errors import StalesimError
from stalesim.plan.candidates import Candidate, GridRequest, emulation_config, grid, run_config
from stalesim.plan.convergence import run_id
from stalesim.runtime.config import TrainConfig

BASE = TrainConfig(model="lenet5", dataset="synthetic", batch_size=32, iterations=10)


def test_grid_fits_the_devices_and_names_what_does_not() -> None:
    cands, skipped = grid(GridRequest(devices=2, schedules=["stale", "zb-v", "dp", "hybrid"], warmups=(0, 5),
                                      switches=(20,)), BASE, blocks=5)
    labels = [c.label for c in cands]
    assert labels[0] == "sequential S=1 (1 device) sgd"  # the baseline first
    assert "stale S=2 sgd" in labels and "stale S=2 warmup=5 sgd" in labels
    assert "zb-v S=4 M=4 sgd" in labels  # two chunks per device: 4 stages on 2 devices
    assert "dp P=2 sgd" in labels and "dp P=2 warmup=5 sgd" not in labels  # no warm-up counterpart
    assert "hybrid S=2 switch=20 sgd" in labels
    assert all(c.devices == 2 for c in cands[1:])
    cands8, skipped8 = grid(GridRequest(devices=8, schedules=["stale", "zb-v", "dp"]), BASE, blocks=5)
    assert [c.label for c in cands8] == ["sequential S=1 (1 device) sgd", "dp P=8 sgd"]
    why = dict(skipped8)
    assert "the model has 5 blocks" in why["stale on 8 devices"] and "16 stages" in why["zb-v on 8 devices"]


def test_hybrid_without_switch_points_is_skipped_and_bad_names_are_errors() -> None:
    _, skipped = grid(GridRequest(devices=2, schedules=["hybrid"]), BASE, blocks=5)
    assert any("--switches" in why for _, why in skipped)
    with pytest.raises(StalesimError, match="schedule: unknown"):
        grid(GridRequest(devices=2, schedules=["nosuch"]), BASE, blocks=5)


def test_mitigations_that_do_not_apply_are_skipped_with_the_reason() -> None:
    cands, skipped = grid(GridRequest(devices=2, schedules=["stale"], mitigations=("none", "spike-compensation"),
                                      optimizers=("adamw",)), BASE, blocks=5)
    assert [c.label for c in cands] == ["sequential S=1 (1 device) adamw", "stale S=2 adamw"]
    assert "spike_compensation" in skipped[0][1]


def test_synchronous_schedules_share_one_emulation_and_run_as_themselves() -> None:
    cands, _ = grid(GridRequest(devices=2, schedules=["gpipe", "1f1b", "zb-h1", "sequential", "stale"]),
                    BASE, blocks=5)
    ids = {c.label: run_id(emulation_config(BASE, c, seed=0, iterations=10)) for c in cands}
    assert ids["gpipe S=2 M=4 sgd"] == ids["1f1b S=2 M=4 sgd"] == ids["zb-h1 S=2 M=4 sgd"]
    assert ids["sequential S=2 sgd"] == ids["sequential S=1 (1 device) sgd"]
    assert len(set(ids.values())) == 3  # sequential, gpipe with M=4, stale
    one = next(c for c in cands if c.label == "1f1b S=2 M=4 sgd")
    cfg = run_config(BASE, one, seed=1, iterations=7)  # the executor runs the schedule itself
    assert (cfg.schedule, cfg.stages, cfg.microbatches, cfg.iterations, cfg.seed) == ("1f1b", 2, 4, 7, 1)


def test_candidate_labels_and_shapes() -> None:
    c = Candidate("pipe-sgd", devices=4, stages=1, workers=4, mitigation="weight-prediction", warmup=10)
    assert c.label == "pipe-sgd P=4 +weight-prediction warmup=10 sgd" and not c.synchronous
    assert c.schedule_config(12).workers == 4 and c.schedule_config(12, warmup=0).warmup == 0
