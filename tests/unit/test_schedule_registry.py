"""Registry and spec facts: each fact a consumer asks agrees with the built schedules."""

from __future__ import annotations

import pytest

from stalesim.errors import ScheduleError
from stalesim.schedule import SCHEDULES, ScheduleConfig, build_schedule, get_spec, resolve, schedule_names
from stalesim.schedule.registry import phases_of
from stalesim.schedule.spec import FAST_PATHS


@pytest.mark.parametrize("name", schedule_names())
def test_facts_agree_with_the_derived_schedule(name: str) -> None:
    spec = get_spec(name)
    sched = build_schedule(spec.config(stages=3 * spec.stages_per_device, batches=14, microbatches=3, workers=2))
    assert sched.policy is spec.policy
    assert sched.uses_micro == spec.uses_micro and sched.data_parallel == spec.data_parallel
    assert sched.local_loss == spec.local_loss and sched.has_steady_state == spec.has_steady_state
    # staleness-free exactly when the derived table says so
    assert (max(sched.versions.staleness()) == 0) == spec.staleness_free
    assert spec.fast_path in FAST_PATHS
    if spec.warmup_with is not None:
        assert not spec.staleness_free and get_spec(spec.warmup_with).staleness_free
    if spec.switch_to is not None:
        assert get_spec(spec.switch_to).staleness_free
    assert spec.placement_free == (spec.staleness_free and not spec.local_loss)
    assert spec.source and spec.summary


def test_resolve_fills_the_defaults() -> None:
    cfg = resolve(ScheduleConfig("stale", stages=4))
    assert cfg.batches == get_spec("stale").sim_batches(4, 1) == 48
    w = resolve(ScheduleConfig("stale", stages=4, warmup=5))
    assert w.batches == 53  # the warm-up plus a full-length steady run
    h = resolve(ScheduleConfig("hybrid", stages=2, batches=10))
    assert h.switch == 5


def test_phases_without_building() -> None:
    ph = phases_of(ScheduleConfig("hybrid", stages=2, batches=10, warmup=2, switch=7))
    assert [(p.schedule, p.first, p.last) for p in ph] == [("sequential", 0, 2), ("hybrid", 2, 7),
                                                           ("sequential", 7, 10)]
    assert [(p.schedule, p.first, p.last) for p in phases_of(ScheduleConfig("gpipe", stages=2, batches=4,
                                                                           microbatches=2, warmup=2))] \
        == [("gpipe", 0, 4)]  # synchronous already: the warm-up changes nothing


def test_grid_config_keeps_only_what_applies() -> None:
    assert get_spec("stale").config(stages=3, microbatches=4, workers=2) == ScheduleConfig("stale", stages=3)
    assert get_spec("2bw").config(stages=5, microbatches=1).microbatches == 4  # at least S - 1
    assert get_spec("dp").config(workers=4).workers == 4


def test_unknown_and_malformed() -> None:
    with pytest.raises(ScheduleError, match="schedule: unknown 'x'"):
        get_spec("x")
    with pytest.raises(ScheduleError, match="expected a ScheduleConfig"):
        build_schedule("stale")  # type: ignore[arg-type]
    assert list(SCHEDULES) == schedule_names()
