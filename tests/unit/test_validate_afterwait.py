"""The after-wait cost: curves measured with co-runners busy, charged by the idle time the
simulated timeline gives each action."""

from __future__ import annotations

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim.model import SimHardware
from stalesim.validate.afterwait import idle_gaps, wait_factor, wait_factors
from stalesim.validate.costmodel import CostModel, simulate_with_costs, stage_costs_for
from stalesim.validate.stagetime import StageTimes, layout_key
from stalesim.workloads.profile import uniform_profile


def _cm() -> CostModel:
    return CostModel(uniform_profile(4, 1e-3, 2e-3, 32, param_bytes=4000, output_bytes=10_000, saved_bytes=100))


def _hw() -> SimHardware:
    return SimHardware(device="x", link="l", latency_ns=1000, bandwidth_Bps=1e9)


def test_the_factor_interpolates_through_one_at_no_wait_and_is_flat_beyond() -> None:
    curve = [(0.005, 1.02), (0.025, 1.10)]
    assert wait_factor(curve, 0.0) == 1.0
    assert wait_factor(curve, 0.0025) == pytest.approx(1.01)
    assert wait_factor(curve, 0.015) == pytest.approx(1.06)
    assert wait_factor(curve, 0.025) == pytest.approx(1.10)
    assert wait_factor(curve, 1.0) == pytest.approx(1.10)  # a longer wait cannot evict more
    assert wait_factor([], 0.02) == 1.0


def _times(after: float) -> StageTimes:
    """Stage times whose contended actions take ``after`` times as long after a wait of 0.1 ms
    or more (the curve is flat from there: the simulated gaps here are milliseconds)."""
    b2b = [{"F": 1e-3, "B": 2e-3}, {"F": 1e-3, "B": 2e-3, "LOSS": 0.0}]
    waited = [{k: v * after for k, v in s.items()} for s in b2b]
    return StageTimes(b2b, contended=StageTimes(b2b, after_wait={1e-4: StageTimes(waited),
                                                                 5e-4: StageTimes(waited)}))


def test_ratios_are_pooled_over_stages_per_kind_and_round_trip() -> None:
    t = _times(1.2)
    assert t.contended is not None
    r = t.contended.wait_ratios()
    assert set(r) == {"F", "B"}
    assert r["F"] == [(1e-4, pytest.approx(1.2)), (5e-4, pytest.approx(1.2))]
    assert StageTimes.from_dict(t.to_dict()) == t


def test_idle_gaps_read_the_timeline() -> None:
    """Sequential on 2 devices: device 1 idles before its F (device 0 ran B, U, F) and device 0
    before its B (device 1 ran F, LOSS, B); device 0's F follows its own update and device 1's
    B its LOSS at once. Pipedream keeps both devices busy (no long gaps)."""
    cm = _cm()
    seq, _ = simulate_with_costs(cm, _hw(), ScheduleConfig("sequential", stages=2, batches=16), ppv=[2],
                                 batch_size=32)
    gaps = idle_gaps(seq, ("F", "B"))
    assert min(gaps[("F", 1)]) > 1e-3 and min(gaps[("B", 0)]) > 1e-3  # waited for the other device
    assert max(gaps[("F", 0)]) < 1e-4 and max(gaps[("B", 1)]) < 1e-4  # right after its own work
    pd, _ = simulate_with_costs(cm, _hw(), ScheduleConfig("pipedream", stages=2, batches=16), ppv=[2],
                                batch_size=32)
    pgaps = idle_gaps(pd, ("F", "B"))
    assert max(g for gs in pgaps.values() for g in gs) < 1e-3
    f = wait_factors(seq, {"F": [(1e-3, 1.5)]})
    assert f[("F", 1)] == pytest.approx(1.5) and f[("F", 0)] == pytest.approx(1.0) and ("B", 0) not in f


def test_a_message_cpu_job_does_not_end_the_wait() -> None:
    """Where a transfer takes a share of the core (no copy engine), the receive's CPU job lies
    at the end of the wait it ends: the backward after it still waited the whole time the
    other device computed, as on hardware whose transfers take no core."""
    cm = _cm()
    cfg = ScheduleConfig("sequential", stages=2, batches=16)
    free, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    shared = SimHardware(device="x", link="l", latency_ns=1000, bandwidth_Bps=1e9,
                         comm_overlaps_compute=False, cpu_comm_occupancy=0.5)
    busy, _ = simulate_with_costs(cm, shared, cfg, ppv=[2], batch_size=32)
    assert busy.timeline is not None and busy.timeline.cpu_jobs  # the receives do take the core
    g_free, g_busy = idle_gaps(free, ("B",))[("B", 0)], idle_gaps(busy, ("B",))[("B", 0)]
    assert min(g_busy) > 1e-3  # device 1's F, LOSS and B: milliseconds
    assert min(g_busy) == pytest.approx(min(g_free), rel=0.05)


def test_stage_costs_multiply_the_waited_kinds_only() -> None:
    t = _times(1.0)
    base = stage_costs_for(_cm(), [2], [2], batch_size=32, action_batch=32, times=t)
    c = stage_costs_for(_cm(), [2], [2], batch_size=32, action_batch=32, times=t, waits={("F", 1): 1.5})
    assert c.f_ns == (base.f_ns[0], round(base.f_ns[1] * 1.5))
    assert c.b_ns == base.b_ns


def test_a_schedule_that_waits_pays_the_curve_one_that_does_not_barely() -> None:
    """Sequential waits before half its actions (above): 30% slower after a wait, its
    prediction rises by about 30% of that half; pipedream's devices wait only for a message's
    latency now and then, so its prediction barely moves."""
    cm = _cm()
    for name, lo, hi in (("sequential", 1.08, 1.2), ("pipedream", 1.0, 1.03)):
        cfg = ScheduleConfig(name, stages=2, batches=16)
        key = layout_key(build_schedule(cfg), [2], 32)
        cm.stage_times[key] = _times(1.0)
        plain, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
        cm.stage_times[key] = _times(1.3)
        r, info = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
        assert lo <= r.iteration_time_s / plain.iteration_time_s <= hi, name
        if name == "sequential":
            assert info["wait_factors"]["F:1"] == pytest.approx(1.3)
            assert info["wait_factors"]["F:0"] == pytest.approx(1.0)
