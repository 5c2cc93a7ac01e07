"""Text views: the step x device grid and the version table."""

from __future__ import annotations

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.schedule.render import grid, version_table


def test_grid_of_a_two_stage_pipeline() -> None:
    text = grid(build_schedule(ScheduleConfig("sequential", stages=2, batches=1)))
    # zero-time actions (U) appear in the step where they happen: right after their backward
    assert text.splitlines() == ["step  dev0  dev1", "0     0F0   .", "1     .     1F0",
                                 "2     .     1B0", "3     0B0   1U0", "4     0U0   ."]


def test_version_table_marks_staleness_per_stage() -> None:
    text = version_table(build_schedule(ScheduleConfig("stale", stages=2, batches=4)))
    lines = text.splitlines()
    assert lines[0].split() == ["batch", "stage0", "vF/vB/u", "stage1", "vF/vB/u"]
    assert lines[3].split() == ["2", "0/2/3", "2/2/3"]  # stage 0's forward is 2 updates old
    assert lines[-1].split() == ["staleness", "2", "0"]


def test_grid_truncates_long_runs() -> None:
    text = grid(build_schedule(ScheduleConfig("stale", stages=2, batches=50)), max_steps=10)
    assert text.splitlines()[-1].startswith("... (") and len(text.splitlines()) == 12
