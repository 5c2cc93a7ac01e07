"""The plausibility pass: every physical limit it checks is flagged with its cause."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule, schedule_names
from stalesim.sim import simulate
from stalesim.sim.model import SimHardware, resolve_cuts, stage_costs, uniform_costs
from stalesim.sim.plausibility import (
    check_iteration,
    check_memory,
    check_relative_speedup,
    check_speedup,
    check_utilization,
    device_work_ns,
    without_speedup,
)
from stalesim.workloads.hardware import get_link
from stalesim.workloads.profile import profile_from_dict, uniform_profile


def sim(workload, name, *, stages=1, microbatches=1, workers=1, batches=None, switch=None,
        batch_size=None, hardware=None, method="event", keep_timeline=True, costs=None):
    """simulate() with one shape for every schedule (flags that do not apply are dropped by
    the spec's grid helper, as in a sweep)."""
    from stalesim.schedule import get_spec
    from stalesim.sim import SimOptions

    spec = get_spec(name)
    cfg = spec.config(stages=stages, microbatches=microbatches, workers=workers, batches=batches,
                      switch=switch if spec.switches else None)
    return simulate(costs if costs is not None else workload, cfg, hardware,
                    SimOptions(batch_size=batch_size, method=method, keep_timeline=keep_timeline))

def _prof():
    return uniform_profile(8, 1e-3, 2e-3, 32, update_s=1e-4, param_bytes=1_000_000,
                           output_bytes=100_000, saved_bytes=1_000_000)


def _two_point(t16_ms: float, t32_ms: float):
    """One layer measured at batch 16 and 32 (forward; backward = 2 x)."""
    def layer(ms: float, b: int) -> dict:
        return {"name": "l0", "forward_s": ms * 1e-3, "backward_s": 2 * ms * 1e-3, "update_s": 0.0,
                "param_bytes": 1000, "output_bytes": 10 * b, "saved_bytes": 10 * b, "flops": 0,
                "weight_layers": 1}
    d = {"schema_version": 1, "model": "m", "device": "cpu", "dtype": "float32", "batch_size": 32,
         "layers": [layer(t32_ms, 32)],
         "by_batch_size": [{"batch_size": 16, "layers": [layer(t16_ms, 16)]},
                           {"batch_size": 32, "layers": [layer(t32_ms, 32)]}]}
    return profile_from_dict(d)


@pytest.mark.parametrize("method", ["event", "fast"])
def test_no_warnings_on_plain_configurations(method) -> None:
    p = _prof()
    hw = SimHardware.from_link("cpu", get_link("10gbe"), overlaps=False, occupancy=1.0)
    for name in schedule_names():
        for S, M, P in ((2, 4, 2), (4, 8, 4)):
            r = sim(p, name, stages=S, microbatches=M, workers=P, hardware=hw, method=method,
                         switch=8 if name == "hybrid" else None, keep_timeline=False)
            assert r.warnings == [], (name, S, M, P, r.warnings)
            assert all(0 <= u <= 1 for u in r.utilization)
            assert r.speedup <= r.devices * (1 + 1e-6)


def test_result_carries_cost_provenance() -> None:
    r = sim(_prof(), "gpipe", stages=2, microbatches=4, batch_size=64)
    assert r.cost_source == "extrapolated"  # micro-batch 16 and batch 64, profile at 32 only
    d = r.to_dict()
    assert d["cost_source"] == "extrapolated" and d["warnings"] == []
    assert d["cost_detail"]["action_batch"]["batch_size"] == 16
    assert d["cost_detail"]["batch_size"]["source"] == "extrapolated"
    assert d["cost_detail"]["measured_batch_sizes"] == [32] and d["cost_detail"]["rule"] == "conservative"
    assert d["stage_costs"]["cost_source"]["action_batch"]["source"] == "extrapolated"
    text = r.summary()
    assert "costs            extrapolated (profiled at batch 32), extrapolation rule conservative" in text
    assert "note: costs EXTRAPOLATED outside the profiled batch sizes" in text
    m = sim(_prof(), "gpipe", stages=2, microbatches=1, batch_size=32)
    assert m.cost_source == "measured" and "EXTRAPOLATED" not in m.summary()
    g = sim(None, "sequential", stages=1, costs=uniform_costs(1, 10, 20))
    assert g.cost_source == "given"


def test_speedup_above_devices_from_given_costs() -> None:
    costs = uniform_costs(1, 1_000, 2_000, seq_ns=30_000)  # baseline 10x the work
    r = sim(None, "sequential", stages=1, costs=costs)
    assert r.speedup == pytest.approx(10.0)
    assert len(r.warnings) == 1
    assert r.warnings[0].startswith("speed-up 10.000x exceeds the 1 device(s) used")
    assert "given directly" in r.warnings[0]
    assert "WARNING: speed-up 10.000x" in r.summary()


def test_speedup_above_devices_implied_by_measurements() -> None:
    # batch 16 measured at 0.5 ms/sample, batch 32 at 1 ms/sample: dp over 2 workers of 16
    r = sim(_two_point(8.0, 32.0), "dp", workers=2, batch_size=32)
    assert r.speedup > 2
    (w,) = r.warnings
    assert "exceeds the 2 device(s)" in w and "Implied by the measured profile inside its range" in w
    assert "batch 16: measured at batch 16" in w and "batch 32: measured at batch 32" in w


def test_speedup_above_devices_from_trend_extrapolation_names_it() -> None:
    # per sample 1.0 at 16, 1.25 at 32 (t = 16, 40); the trend line makes batch 64 cost
    # 88 ms, and dp over 2 workers of 32 (measured 40 ms each) looks super-linear
    p = _two_point(16.0, 40.0).with_extrapolation("trend")
    r = sim(p, "dp", workers=2, batch_size=64)
    (w,) = r.warnings
    assert "exceeds the 2 device(s)" in w and "extrapolated outside the profiled batch sizes" in w
    assert "trend: line through batches 16 and 32" in w
    # the default rule does not create it: batch 64 at batch 16's 1.0 ms/sample
    c = sim(_two_point(16.0, 40.0), "dp", workers=2, batch_size=64)
    assert c.speedup <= 2 and c.warnings == []


def test_utilization_outside_unit_interval_is_flagged_and_clipped() -> None:
    r = sim(_prof(), "gpipe", stages=2, microbatches=4)
    bad = copy.deepcopy(r)
    bad.utilization = [1.3, 0.5]
    (w,) = check_utilization(bad)
    assert w.startswith("utilization: device 0 at 1.3000 is outside [0, 1]") and "clipped" in w
    assert bad.utilization == [1.0, 0.5] and bad.bubble_fraction == pytest.approx(0.25)
    assert check_utilization(r) == []


def test_iteration_below_busiest_device_compute_is_flagged() -> None:
    p = _prof()
    r = sim(p, "gpipe", stages=2, microbatches=4, keep_timeline=False)
    sched = build_schedule(ScheduleConfig("gpipe", stages=2, batches=r.batches, microbatches=4))
    cuts, ppv = resolve_cuts(p, 2, None, 32)
    costs = stage_costs(p, cuts, batch_size=32, action_batch=8, ppv=ppv)
    work = device_work_ns(sched, costs)
    # 4 layers x (F + B) at batch 32 + 4 updates per device
    assert work == pytest.approx([4 * 3e6 + 4 * 1e5] * 2)
    assert check_iteration(r, work) == []
    bad = replace(r, iteration_time_s=r.iteration_time_s / 2)
    (w,) = check_iteration(bad, work)
    assert "is below device 0's compute per mini-batch (12.4 ms)" in w
    # and the speed-up it implies is caught too, as not explained by cheaper work
    bad.speedup = 4.0
    (s,) = check_speedup(bad, costs, work)
    assert "exceeds the 2 device(s)" in s and "is shorter than the devices' work" in s


def test_device_work_counts_a_split_backward() -> None:
    """zero-bubble runs I and W instead of B: both are compute the device does (left out,
    the iteration check's lower bound dropped the whole backward)."""
    costs = uniform_costs(2, 1000, 3000, 100, loss_ns=50, bi_ns=1000, bw_ns=2000)
    sched = build_schedule(ScheduleConfig("zb-h1", stages=2, batches=1, microbatches=4))
    # per device: 4 x (F + I + W) + U; the last stage also 4 LOSS
    assert device_work_ns(sched, costs) == [4 * (1000 + 1000 + 2000) + 100,
                                            4 * (1000 + 1000 + 2000) + 100 + 4 * 50]


def test_memory_below_weights_and_above_capacity() -> None:
    p = _prof()
    r = sim(p, "pipedream", stages=2, keep_timeline=False)
    sched = build_schedule(ScheduleConfig("pipedream", stages=2, batches=r.batches))
    cuts, ppv = resolve_cuts(p, 2, None, 32)
    costs = stage_costs(p, cuts, batch_size=32, action_batch=32, ppv=ppv)
    assert check_memory(r, costs, sched, None) == []
    bad = copy.deepcopy(r)
    bad.peak_memory_bytes = [100, r.peak_memory_bytes[1]]
    (w,) = check_memory(bad, costs, sched, None)
    assert w.startswith("memory: device 0 peak 100 B is below the weights it holds (4000000 B "
                        "for stages [0])")
    small = replace(SimHardware.ideal("tiny"), memory_bytes=1e6)
    (w2,) = check_memory(r, costs, sched, small)
    assert "does not fit" in w2 and "device(s) [0, 1]" in w2
    # sim() reports it on its own with such hardware
    r2 = sim(p, "pipedream", stages=2, hardware=small, keep_timeline=False)
    assert any("does not fit" in x for x in r2.warnings)


def test_relative_speedup_for_callers_with_their_own_baseline() -> None:
    base = sim(_two_point(8.0, 32.0), "sequential", stages=1, batch_size=32)
    r = sim(_two_point(8.0, 32.0), "dp", workers=2, batch_size=32)
    (w,) = check_relative_speedup(r, base, 2)
    assert w.startswith("speed-up ") and "Implied by the measured profile" in w
    assert without_speedup(r.warnings + ["memory: x"]) == ["memory: x"]
    ok = sim(_prof(), "dp", workers=2)
    assert check_relative_speedup(ok, sim(_prof(), "sequential", stages=1), 2) == []
