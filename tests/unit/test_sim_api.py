"""Done-when checks of the simulator through the public API."""

import json
import math

import pytest

from stalesim.schedule import ScheduleConfig
from stalesim.sim import SimOptions, SimResult, simulate
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def prof8():
    # 8 identical layers: forward 1 ms, backward 2 ms at batch 128, no bytes
    return uniform_profile(8, 1e-3, 2e-3, 128)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("method", ["event", "fast"])
def test_flush_schedules_iteration(prof8, name, method):
    r = simulate(prof8, ScheduleConfig(name, stages=4, microbatches=8), options=SimOptions(method=method))
    assert r.iteration_time_s == pytest.approx((8 + 4 - 1) * (0.25 + 0.5) * 1e-3, rel=1e-12)
    assert r.speedup == pytest.approx(24 / 8.25)
    assert r.bubble_fraction == pytest.approx(3 / 11)


@pytest.mark.parametrize("name", ["pipedream", "stale"])
@pytest.mark.parametrize("method", ["event", "fast"])
def test_async_schedules_iteration_and_speedup(prof8, name, method):
    r = simulate(prof8, ScheduleConfig(name, stages=4), options=SimOptions(method=method))
    assert r.iteration_time_s == pytest.approx(6e-3, rel=1e-12)
    assert r.speedup == pytest.approx(4.0, rel=1e-12)
    assert r.throughput_samples_per_s == pytest.approx(128 / 6e-3)
    if method == "event":
        assert r.utilization == pytest.approx([1.0] * 4)


def test_result_fields_and_json(prof8):
    r = simulate(prof8, ScheduleConfig("stale", stages=4))
    assert isinstance(r, SimResult)
    d = r.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    for key in ("iteration_time_s", "fill_drain_s", "makespan_s", "throughput_samples_per_s",
                "speedup", "utilization", "bubble_fraction", "peak_memory_bytes",
                "memory_breakdown", "staleness", "versions", "partition", "hardware"):
        assert key in back
    assert back["staleness"] == [6, 4, 2, 0]
    assert back["partition"]["ppv"] == [2, 4, 6]
    assert "ideal" in r.hardware_note and "profile's own device" in r.hardware_note
    assert r.makespan_s == pytest.approx(r.batches * r.iteration_time_s + r.fill_drain_s)
    assert r.fill_drain_s > 0


def test_ppv_gives_partition_and_stages(prof8):
    r = simulate(prof8, ScheduleConfig("pipedream", stages=4), options=SimOptions(ppv=(1, 2, 3)))
    # stages 1,1,1,5 layers
    assert r.stages == 4 and r.partition["cuts"] == [1, 2, 3]
    # bottleneck stage has 5 layers: 5 * 3 ms per batch
    assert r.iteration_time_s == pytest.approx(15e-3)
    assert r.speedup == pytest.approx(24 / 15)


def test_batch_size_scales(prof8):
    r = simulate(prof8, ScheduleConfig("pipedream", stages=4), options=SimOptions(batch_size=256))
    assert r.iteration_time_s == pytest.approx(12e-3)
    assert r.speedup == pytest.approx(4.0)


def test_data_parallel_split_and_speedup(prof8):
    r = simulate(prof8, ScheduleConfig("dp", stages=2, workers=4))
    assert r.iteration_time_s == pytest.approx(6e-3)  # 24 ms / 4 workers, ideal link
    assert r.speedup == pytest.approx(4.0)
    assert r.devices == 4


def test_schedule_object_is_accepted(prof8):
    from stalesim.schedule import ScheduleConfig, build_schedule

    sched = build_schedule(ScheduleConfig("1f1b", stages=4, microbatches=8, batches=6))
    r = simulate(prof8, sched)
    assert r.batches == 6 and r.microbatches == 8
    assert r.iteration_time_s == pytest.approx(8.25e-3)


def test_fast_and_event_agree_on_a_real_link(prof8):
    from stalesim.schedule import get_spec
    from stalesim.workloads.hardware import hardware_from_catalog

    hw = hardware_from_catalog("h100-sxm", "pcie4-x16")
    prof = uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=4_000_000, param_bytes=1_000_000)
    for name in ("pipedream", "gpipe", "1f1b", "stale"):
        sc = get_spec(name).config(stages=4, microbatches=4)
        e = simulate(prof, sc, hw)
        f = simulate(prof, sc, hw, SimOptions(method="fast"))
        assert math.isclose(e.iteration_time_s, f.iteration_time_s, rel_tol=0.01), name


def test_memory_reported_per_device():
    prof = uniform_profile(8, 1e-3, 2e-3, 128, param_bytes=1000, saved_bytes=64_000, output_bytes=128)
    r = simulate(prof, ScheduleConfig("gpipe", stages=4, microbatches=8))
    # per stage: 2 layers; saved bytes per micro-batch = 2 * 64000 / 8
    assert r.memory_breakdown[0]["activations"] == 8 * 2 * 64_000 // 8
    assert r.memory_breakdown[0]["weights"] == 2000
    assert r.memory_breakdown[0]["optimizer"] == 2000
    assert r.peak_memory_bytes[0] == sum(r.memory_breakdown[0].values())


def test_bad_method(prof8):
    from stalesim.errors import StalesimError

    with pytest.raises(StalesimError, match="method"):
        simulate(prof8, ScheduleConfig("stale", stages=2), options=SimOptions(method="magic"))
    with pytest.raises(StalesimError, match="batch_size"):
        simulate(prof8, ScheduleConfig("gpipe", stages=2, microbatches=3))
    with pytest.raises(StalesimError, match="ppv: 1 entries give 2 stages, but stages is 4"):
        simulate(prof8, ScheduleConfig("stale", stages=4), options=SimOptions(ppv=(3,)))
    with pytest.raises(StalesimError, match="microbatches: schedule 'stale' does not split"):
        simulate(prof8, ScheduleConfig("stale", stages=2, microbatches=4))
