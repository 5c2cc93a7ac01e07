"""Period detection and the long-run mapping (the exactness is in test_sim_scale.py)."""

from __future__ import annotations

import numpy as np

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim import SimHardware, uniform_costs
from stalesim.sim.events import busy_in_window, compile_schedule, simulate_program
from stalesim.sim.periodic import Period, batch_memory, batch_rows, busy_at, detect
from stalesim.sim.scale import _mapped_sum


def run(name: str, N: int, latency_ns: int = 5_000, **kw):
    sched = build_schedule(ScheduleConfig(name, stages=4, batches=N, **kw))
    hw = SimHardware(device="x", link="l", latency_ns=latency_ns, bandwidth_Bps=2e10)
    return simulate_program(compile_schedule(sched), uniform_costs(4, 100_000, 200_000, 10_000,
                                                                   msg_bytes=100_000), hw)


def test_memory_and_rows() -> None:
    tl = run("stale", 20)
    assert batch_memory(tl) == 2 * (4 - 1) + 1 + 1  # stage 0: ..., U(c - 2S + 2), then F(c + 1)
    rows = batch_rows(tl, 20)
    assert rows is not None and rows.shape[0] == 20 and rows.shape[2] == 4
    assert batch_memory(run("1f1b", 6, microbatches=4)) == 2  # U(t) then F(t+1)


def test_detects_the_period_and_its_length() -> None:
    per = detect(run("pipedream", 60, latency_ns=0), 60)  # transfers of 5 us hide behind compute
    assert per is not None and per.length == 1 and per.shift_ns == 310_000  # F + B + U: compute-bound
    assert per.safe_end == per.first + (2 * per.memory + 2) + 1 - per.memory - 1
    # 5 us latency: stage 0's round trip (4 x (F + B) + 6 transfers of 10 us + U = 1.27 ms) over its
    # 4 batches in flight binds, and the schedule repeats every 4 batches, not every batch
    per = detect(run("pipedream", 60), 60)
    assert per is not None and per.length == 4 and per.shift_ns == 1_270_000
    assert detect(run("pipedream", 8), 8) is None  # too short to verify a period


def test_source_mapping_inserts_whole_periods() -> None:
    per = Period(first=2, length=2, shift_ns=10, memory=1, safe_end=6, inserted=3)
    got = [per.source(k) for k in range(16)]
    assert got[:6] == [(k, 0) for k in range(6)]
    assert got[6:12] == [(4, 1), (5, 1), (4, 2), (5, 2), (4, 3), (5, 3)]
    assert got[12:] == [(6, 3), (7, 3), (8, 3), (9, 3)]


def test_mapped_sum_equals_the_explicit_sum() -> None:
    per = Period(first=2, length=3, shift_ns=10, memory=1, safe_end=7, inserted=5)
    vals = np.arange(40, dtype=np.int64).reshape(10, 4) ** 2
    long = np.stack([vals[per.source(k)[0]] for k in range(10 + 15)])
    for lo, hi in ((0, 25), (3, 9), (7, 22), (8, 8), (20, 25), (5, 24)):
        assert (_mapped_sum(vals, lo, hi, per) == long[lo:hi].sum(axis=0)).all()
    assert (_mapped_sum(vals, 2, 9, None) == vals[2:9].sum(axis=0)).all()


def test_busy_at_matches_busy_in_window() -> None:
    tl = run("1f1b", 6, microbatches=3)
    times = sorted({0, *tl.batch_done, tl.makespan, tl.makespan // 3})
    cum = busy_at(tl, times)
    for a, b in zip(times, times[1:]):
        assert (cum[:, times.index(b)] - cum[:, times.index(a)]).tolist() == busy_in_window(tl, a, b)
