"""The demo predicts the validated ranks with validation's machine terms: its grid's rows for
this machine equal what ``simulate --calibration`` predicts, and its summary compares the
validated schedules predicted against measured at the same mini-batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from _calibration import calibration

from stalesim.cli.demo_cmd import calibrated_model, validated_fastest
from stalesim.cost.apply import predict
from stalesim.cost.calibration import write_calibration
from stalesim.cost.model import CostModel
from stalesim.schedule import get_spec
from stalesim.sim import SimOptions
from stalesim.sim.model import SimHardware
from stalesim.validate.demo import predict_grid
from stalesim.workloads.profile import uniform_profile

B = 32


@pytest.fixture(scope="module")
def profile():
    return uniform_profile(6, 1e-3, 2e-3, B, update_s=2e-4, param_bytes=40_000, output_bytes=8_000,
                           saved_bytes=8_000)


@pytest.mark.parametrize("name", ["1f1b", "pipedream", "zb-h1", "dp"])
def test_the_grid_for_this_machine_is_simulate_with_the_calibration(name: str, profile, tmp_path: Path) -> None:
    write_calibration(tmp_path / "calibration.json", calibration())
    hw = SimHardware.ideal("cpu")
    cm, link = calibrated_model(CostModel(profile), hw, tmp_path / "calibration.json")
    assert cm.overhead_s == calibration().overhead_s and cm.comm == calibration().comm
    assert link.latency_ns > 0  # the per-message arrival fit, not the ideal link
    (row,) = [r for r in predict_grid(cm, link, devices=(2,), schedules=(name,), batch_size=B, gpu_links=())
              if r["schedule"] == name]
    spec = get_spec(name)
    cfg = spec.config(stages=1 if spec.data_parallel else 2, batches=None, microbatches=4 if spec.uses_micro else 1,
                      workers=2)
    expected = predict(profile, calibration(), cfg, hw, SimOptions(batch_size=B)).iteration_time_s
    assert row["iteration_time_s"] == pytest.approx(expected, rel=1e-12)
    # and differs from the uncalibrated prediction the demo gave before (the terms count)
    bare = predict(profile, None, cfg, hw, SimOptions(batch_size=B)).iteration_time_s
    assert row["iteration_time_s"] > bare * 1.01


def test_without_a_calibration_file_the_model_is_unchanged(profile, tmp_path: Path) -> None:
    cm, hw = CostModel(profile), SimHardware.ideal("cpu")
    assert calibrated_model(cm, hw, tmp_path / "none.json") == (cm, hw)


def test_validated_fastest_compares_predicted_and_measured_on_the_same_rows() -> None:
    rows = [{"schedule": "1f1b", "predicted_speedup": 0.9, "measured_speedup": 1.1},
            {"schedule": "pipedream", "predicted_speedup": 1.3, "measured_speedup": 1.6},
            {"schedule": "stale", "predicted_speedup": 1.2, "measured_speedup": 1.7},
            {"schedule": "broken", "predicted_speedup": None, "measured_speedup": 9.0}]
    assert validated_fastest(rows) == ("predicted pipedream (1.30x), measured stale (1.70x): "
                                       "a different schedule")
    assert validated_fastest(rows[:2]).endswith("measured pipedream (1.60x): the same schedule")
    assert validated_fastest(rows[3:]) is None
