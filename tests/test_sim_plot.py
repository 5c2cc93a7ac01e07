"""Gantt figure written with the Agg backend."""

import pytest

from stalesim.schedule import ScheduleConfig
from stalesim.sim import simulate
from stalesim.workloads.hardware import hardware_from_catalog
from stalesim.workloads.profile import uniform_profile


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_gantt_written(tmp_path, suffix):
    prof = uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=2_000_000)
    r = simulate(prof, ScheduleConfig("1f1b", stages=4, microbatches=4, batches=2),
                 hardware_from_catalog("cpu-core", "10gbe"))
    path = r.plot(tmp_path / f"g{suffix}")
    assert path.exists() and path.stat().st_size > 1000
    if suffix == ".png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in path.read_bytes()[:2000]
