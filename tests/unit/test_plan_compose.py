"""Composition on constructed inputs with known answers: time = iterations x iteration
time (+ phases), intervals, feasibility, ranking, speed-ups, the Pareto front."""

from __future__ import annotations

import pytest

from stalesim.plan.candidates import Candidate
from stalesim.plan.compose import compose, feasibility, pareto, time_interval
from stalesim.plan.convergence import Convergence, Interval
from stalesim.plan.timing import Timing


def _t(it: float, peak: int = 100, *, k: int = 0, first: float = 0.0, over: float = 0.0) -> Timing:
    return Timing(first_batches=k, first_s=first, steady_s=it, overhead_s=over, peak_memory_bytes=(peak, peak))


def _c(name: str, devices: int = 2, **kw) -> Candidate:
    return Candidate(name, devices=devices, stages=devices if devices > 1 else 1, **kw)


def _conv(mean: float, lo: float, hi: float) -> Convergence:
    return Convergence([int(lo), int(hi)], 1000, "reached", Interval(mean, lo, hi, 2))


def test_time_for_charges_each_phase_at_its_speed() -> None:
    t = _t(0.5, k=10, first=2.0, over=3.0)
    assert t.time_for(4) == pytest.approx(3.0 + 4 * 2.0)
    assert t.time_for(30) == pytest.approx(3.0 + 10 * 2.0 + 20 * 0.5)


def test_interval_multiplies_iterations_by_time_and_widens_by_the_prediction_error() -> None:
    iv = time_interval(Interval(100, 80, 130, 3), _t(0.2, over=1.0), 0.1)
    assert iv.mean == pytest.approx(1.0 + 100 * 0.2)
    assert iv.lo == pytest.approx((1.0 + 80 * 0.2) * 0.9)
    assert iv.hi == pytest.approx((1.0 + 130 * 0.2) * 1.1)


def test_feasibility_names_the_device_need_and_capacity() -> None:
    ok, why = feasibility(_t(1.0, peak=2**30), 2 * 2**30)
    assert ok and why == ""
    ok, why = feasibility(Timing(0, 0.0, 1.0, 0.0, (2**30, 3 * 2**30)), 2 * 2**30)
    assert not ok and "device 1 needs 3 GiB" in why and "has 2 GiB" in why
    ok, why = feasibility(_t(1.0), None)
    assert ok and "unknown" in why


def test_ranking_speedups_and_infeasible_rows() -> None:
    seq1 = _c("sequential", devices=1)
    gp = _c("gpipe", microbatches=4)
    st = _c("stale")
    pd = _c("pipedream")
    big = _c("2bw", microbatches=4)
    cands = [seq1, gp, st, pd, big]
    convs = {seq1: _conv(100, 90, 110), gp: _conv(100, 90, 110), st: _conv(120, 100, 140),
             pd: Convergence([None, 50], 200, "not reached", None, "not reached"),
             big: _conv(100, 90, 110)}
    timings = {seq1: _t(1.0), gp: _t(0.6), st: _t(0.4), pd: _t(0.3), big: _t(0.1, peak=10**12)}
    rows = compose(cands, convs, timings, time_error=0.0, capacity_bytes=10**9)
    order = [r.candidate for r in rows]
    # stale 48 s < gpipe 60 s < sequential 100 s; pipedream unreached; 2bw out of memory
    assert order == [st, gp, seq1, pd, big]
    assert [r.rank for r in rows] == [1, 2, 3, None, None]
    by = {r.candidate: r for r in rows}
    assert by[st].time_s.mean == pytest.approx(48.0)
    assert by[st].speedup_vs_sync == pytest.approx(60.0 / 48.0)  # best synchronous on 2 devices: gpipe
    assert by[st].speedup_vs_one_device == pytest.approx(100.0 / 48.0)
    assert by[gp].speedup_vs_sync == pytest.approx(1.0)
    assert not by[big].feasible and "out of memory" in by[big].reason
    assert by[big].rank is None and by[big].speedup_vs_sync is None


def test_pareto_front_keeps_the_undominated() -> None:
    a, b, c = _c("stale"), _c("gpipe", microbatches=4), _c("pipedream")
    convs = {x: _conv(10, 10, 10) for x in (a, b, c)}
    timings = {a: _t(1.0, peak=300), b: _t(2.0, peak=100), c: _t(3.0, peak=200)}  # c is dominated by b
    rows = compose([a, b, c], convs, timings, time_error=0.0, capacity_bytes=None)
    assert [r.candidate for r in pareto(rows)] == [b, a]


def test_policy_wins_names_a_winning_warmup() -> None:
    from stalesim.plan.report import policy_wins, table

    a, aw = _c("stale"), _c("stale", warmup=20)
    b, bw = _c("pipedream"), _c("pipedream", warmup=20)
    convs = {a: _conv(100, 100, 100), aw: _conv(60, 60, 60), b: _conv(50, 50, 50), bw: _conv(48, 48, 48)}
    t = {a: _t(0.5), aw: _t(0.5, k=20, first=1.0), b: _t(0.5), bw: _t(0.5, k=20, first=2.0)}
    rows = compose([a, aw, b, bw], convs, t, time_error=0.0, capacity_bytes=None)
    # stale: 50 s plain, 20 + 20 = 40 s with the warm-up; pipedream: 25 s plain, 54 s with it
    assert policy_wins(rows) == ["warm-up 20 wins for stale S=2 sgd: 40 s vs 50 s without"]
    text = table(rows, {"model": "m", "dataset": "d", "target": "t", "devices": 2, "hardware": "h",
                        "capacity": "unknown", "time_error": 0.0, "seeds": [0]})
    assert "proposal: pipedream S=2 sgd (predicted 25 s)" in text
