"""The per-term attribution of a time error (stalesim.validate.breakdown): every device's
steady window is split into action kinds, gaps and idle time that add up to the window,
on hand-made spans, on a simulated timeline and on a tiny executor run."""

from __future__ import annotations

import pytest

from stalesim.validate.breakdown import (
    Span,
    attribution,
    goal_term_line,
    goal_terms,
    markdown_table,
    per_device,
    sim_window,
    spans_from_rows,
    spans_from_sim,
    split,
)


def _by_term(sp, device=0):
    out = {}
    for (d, _s, t), v in sp.seconds.items():
        if d == device:
            out[t] = out.get(t, 0.0) + v
    return out


def test_split_names_actions_gaps_and_idle_and_clips_to_the_window() -> None:
    spans = [Span(0, "F", 0, 0.0, 1.0), Span(0, "SEND_F", 0, 1.5, 1.75), Span(0, "B", 0, 2.0, 4.0),
             Span(1, "RECV_F", 1, 1.0, 2.0), Span(1, "F", 1, 2.0, 3.0)]
    sp = split(spans, 0.5, 3.5, iteration_s=1.5)  # two iterations in the window
    assert sp.iterations == pytest.approx(2.0)
    assert _by_term(sp, 0) == pytest.approx({"F": 0.5, "gap:F": 0.5, "SEND_F": 0.25, "gap:SEND_F": 0.25,
                                             "B": 1.5})
    # device 1 starts late: the window's start is idle; after its last action, a gap to the end
    assert _by_term(sp, 1) == pytest.approx({"idle": 0.5, "RECV_F": 1.0, "F": 1.0, "gap:F": 0.5})
    for d in (0, 1):
        assert sp.device_total(d) == pytest.approx(3.0)
    assert sp.count[(0, 0, "B")] == 1 and (0, 0, "F") not in sp.count  # F started before the window


def test_attribution_differences_add_up_to_the_iteration_time_error() -> None:
    pred = split([Span(0, "F", 0, 0.0, 1.0), Span(0, "B", 0, 1.0, 3.0), Span(0, "F", 0, 3.0, 4.0),
                  Span(0, "B", 0, 4.0, 6.0)], 0.0, 6.0, iteration_s=3.0)
    meas = split([Span(0, "F", 0, 0.0, 1.2), Span(0, "B", 0, 1.25, 3.25), Span(0, "F", 0, 3.3, 4.5),
                  Span(0, "B", 0, 4.55, 6.55)], 0.0, 6.6, iteration_s=3.3)
    rows = attribution("x", pred, meas)
    by = {r["term"]: r for r in rows}
    assert by["F"]["measured_minus_predicted_ms"] == pytest.approx(200.0)
    assert by["gap:F"]["measured_ms"] == pytest.approx(50.0) and by["gap:F"]["predicted_ms"] == 0.0
    assert by["B"]["measured_mean_us"] == pytest.approx(2e6) and by["B"]["measured_count"] == 1.0
    assert sum(r["measured_minus_predicted_ms"] for r in rows) == pytest.approx(300.0)  # 3.3 s - 3.0 s
    (dev,) = per_device(rows)
    assert dev["F"] == pytest.approx(200.0) and dev["gaps"] == pytest.approx(100.0)
    assert dev["measured_ms"] - dev["predicted_ms"] == pytest.approx(300.0)
    table = markdown_table([dev])
    assert table[2].startswith("| x | 0 | 3000.00 | 3300.00 |") and table[2].endswith("+300.00 | F +200.00 |")


def test_a_simulated_timeline_splits_into_its_iteration_time_on_every_device() -> None:
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.sim import SimOptions, simulate
    from stalesim.sim.model import SimHardware, uniform_costs

    sched = build_schedule(ScheduleConfig(schedule="1f1b", stages=2, batches=8, microbatches=4))
    costs = uniform_costs(2, 1000, 2000).with_overheads(gap={"F": (50, 50), "RECV_F": (30, 30)})
    r = simulate(costs, sched, SimHardware(device="cpu-core", link="test", latency_ns=100), SimOptions())
    lo, hi = sim_window(r)
    sp = split(spans_from_sim(r), lo, hi, r.iteration_time_s)
    assert sp.iterations == pytest.approx((hi - lo) / r.iteration_time_s)
    for d in range(2):
        assert sp.device_total(d) == pytest.approx(hi - lo)
    # F of stage 0 costs 1000 ns + its 50 ns gap, 4 micro-batches per iteration
    t0 = _by_term(sp, 0)
    assert t0["F"] / sp.iterations == pytest.approx(4e-6)
    assert t0["gap:F"] / sp.iterations == pytest.approx(4 * 50e-9)
    # the prediction attributed against itself: no difference anywhere
    assert all(abs(x["measured_minus_predicted_ms"]) < 1e-12 for x in attribution("1f1b", sp, sp, sp))


@pytest.mark.slow
def test_a_tiny_run_splits_into_its_measured_window_and_busy_time() -> None:
    """On an executor run: per device the terms add up to the steady window, and the compute
    kinds to the busy time behind the measured utilization."""
    pytest.importorskip("torch")
    from stalesim.executor import make_job, run_local
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import build_schedule
    from stalesim.schedule.actions import COMPUTE_KIND_NAMES
    from stalesim.validate.measured import measured_timing

    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="1f1b", stages=2, microbatches=2,
                      iterations=8, batch_size=16, synthetic_size=64, lr=0.05).check()
    res = run_local(make_job(cfg, keep_rows=True, evaluate=False), "cpu:2", timeout_s=60)
    mt = measured_timing(res, build_schedule(cfg.schedule_config(cfg.iterations)))
    lo, hi = mt["window_s"]
    sp = split(spans_from_rows(res["rows"]), lo, hi, mt["iteration_time_s"])
    for d in range(2):
        terms = _by_term(sp, d)
        assert sum(terms.values()) == pytest.approx(hi - lo, rel=1e-9)
        busy = sum(v for t, v in terms.items() if t in COMPUTE_KIND_NAMES)
        assert busy == pytest.approx(mt["utilization"][d] * (hi - lo), rel=1e-9)
        assert {"F", "B", "U", "gap:F"} <= set(terms)


def _att(schedule, device, term, pred, meas, repl=None):
    return {"schedule": schedule, "device": device, "stage": device, "term": term,
            "predicted_ms": pred, "measured_ms": meas, "replayed_ms": pred if repl is None else repl}


def test_goal_terms_name_the_term_of_each_missed_goal_with_its_size() -> None:
    # two schedules of two devices, both optimistic (measured slower): B is 10% slow on every
    # device of both; RECV waits 1 ms more in "a" and 1 ms less in "b", so it cancels
    rows = [_att("a", 0, "F", 10.0, 10.0), _att("a", 0, "B", 20.0, 22.0), _att("a", 0, "RECV_B", 5.0, 6.0),
            _att("a", 1, "F", 10.0, 10.0), _att("a", 1, "B", 20.0, 22.0), _att("a", 1, "RECV_F", 5.0, 6.0),
            _att("b", 0, "F", 10.0, 10.0), _att("b", 0, "B", 20.0, 22.0), _att("b", 0, "RECV_B", 5.0, 4.0),
            _att("b", 1, "F", 10.0, 10.0), _att("b", 1, "B", 20.0, 22.0, repl=23.0),
            _att("b", 1, "gap:B", 5.0, 4.0, repl=7.0)]
    sched = [{"schedule": "a", "time_error": 35 / 38 - 1, "replay_time_error": -0.001},
             {"schedule": "b", "time_error": 35 / 36 - 1, "replay_time_error": 0.04}]
    met = {"median_abs_time_error": False, "max_abs_time_error": False, "median_abs_replay_error": True,
           "max_abs_replay_error": False, "max_abs_memory_error": False}
    out = goal_terms(rows, sched, met)
    assert set(out) == {"median_abs_time_error", "max_abs_time_error", "max_abs_replay_error"}
    med = out["median_abs_time_error"]
    # B: +2 ms on each device of each schedule -> +2 ms per iteration toward the error; RECV
    # +1 in a, -1 in b, both optimistic -> 0 on average: not named
    assert med["term"] == "B" and med["schedules"] == 2 and med["against"] == "predicted"
    assert med["toward_error_ms"] == pytest.approx(2.0)
    assert med["of_iteration"] == pytest.approx(2.0 / 35.0)
    assert (med["side_ms"], med["measured_ms"]) == pytest.approx((40.0, 44.0))
    assert med["term_error"] == pytest.approx(0.10)
    mx = out["max_abs_time_error"]
    assert mx["schedule"] == "a" and mx["term"] == "B" and mx["toward_error_ms"] == pytest.approx(2.0)
    # the replay: b is pessimistic (+4%); on device 1 its gaps were replayed 3 ms too long and
    # B 1 ms too long, on device 0 RECV 1 ms: the gaps carry it, 1.5 ms per iteration over
    # b's two devices
    rp = out["max_abs_replay_error"]
    assert rp["schedule"] == "b" and rp["term"] == "gaps" and rp["against"] == "replayed"
    assert rp["toward_error_ms"] == pytest.approx(1.5)
    assert (rp["side_ms"], rp["measured_ms"], rp["term_error"]) == pytest.approx((7.0, 4.0, 4.0 / 7.0 - 1.0))
    line = goal_term_line("max_abs_replay_error", rp)
    assert line.startswith("max_abs_replay_error: gaps +1.50 ms per iteration toward the error (in `b`")
    assert "4.00 ms per iteration over all devices, 7.00 replayed (-42.9%)" in line
    # every goal met, or no attribution: nothing to name
    assert goal_terms(rows, sched, {k: True for k in met}) == {}
    assert goal_terms([], sched, met) == {}
