"""Fast path vs event path: exact on uniform stages with an ideal link, within 1%
in steady state on random non-uniform stages (ideal link and small latency)."""

import random

import pytest

from stalesim.sim import SimHardware, simulate
from stalesim.sim.fastpath import fast_iteration
from stalesim.sim.model import StageCosts, uniform_costs

CASES = [("sequential", 1, 1), ("gpipe", 1, 1), ("gpipe", 4, 1), ("gpipe", 8, 1), ("1f1b", 2, 1),
         ("1f1b", 8, 1), ("pipedream", 1, 1), ("stale", 1, 1), ("local", 1, 1), ("2bw", 4, 1),
         ("2bw", 8, 1), ("dp", 1, 4), ("pipe-sgd", 1, 4)]


@pytest.mark.parametrize("name,M,P", CASES)
@pytest.mark.parametrize("S", [2, 4, 5])
def test_uniform_ideal_agree_exactly(name, M, P, S):
    if name == "2bw" and M < S - 1:
        pytest.skip("2bw needs M >= S-1")
    c = uniform_costs(S, 300_000, 700_000, 50_000, batch_size=64, action_batch=64 // M)
    r = simulate(costs=c, schedule=name, stages=S, microbatches=M, workers=P)
    assert r.fast_iteration_time_s == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_uniform_closed_forms():
    S, M, F, B = 4, 8, 250_000, 500_000
    hw = SimHardware.ideal()
    c = uniform_costs(S, F, B)
    assert fast_iteration("gpipe", c, hw, microbatches=M).iteration_ns == (M + S - 1) * (F + B)
    assert fast_iteration("1f1b", c, hw, microbatches=M).iteration_ns == (M + S - 1) * (F + B)
    assert fast_iteration("pipedream", c, hw).iteration_ns == F + B
    assert fast_iteration("stale", c, hw).iteration_ns == F + B


def test_ring_allreduce_and_pipe_sgd_formulas():
    hw = SimHardware(device="x", link="l", latency_ns=5_000, bandwidth_Bps=1e10)
    n, P = 40_000_000, 4
    ring = 2 * (P - 1) * 5_000 + round(2 * (P - 1) / P * n / 1e10 * 1e9)
    assert hw.allreduce_ns(n, P) == ring
    c = uniform_costs(2, 1_000_000, 2_000_000, param_bytes=n // 2)
    t_comp, t_comm = 6_000_000, 2 * hw.allreduce_ns(n // 2, P)
    ps = fast_iteration("pipe-sgd", c, hw, workers=P)
    assert ps.iteration_ns == max(t_comp, t_comm)
    assert ps.terms["synchronous_ns"] == t_comp + t_comm
    dp = fast_iteration("dp", c, hw, workers=P)
    assert max(t_comp, t_comm) <= dp.iteration_ns <= t_comp + t_comm


def _random_costs(rng, S, msg=0):
    f = tuple(rng.randint(100_000, 1_000_000) for _ in range(S))
    b = tuple(int(x * rng.uniform(1.5, 2.5)) for x in f)
    u = tuple(rng.randint(0, 50_000) for _ in range(S))
    return StageCosts(f, b, u, 0, (msg,) * S, (4_000_000,) * S, (0,) * S,
                      sum(f) + sum(b) + sum(u), 64, 16)


@pytest.mark.parametrize("seed", range(6))
def test_random_nonuniform_within_one_percent(seed):
    rng = random.Random(seed)
    hws = [SimHardware.ideal(),
           SimHardware(device="x", link="l", latency_ns=5_000, bandwidth_Bps=2e10)]
    for hw in hws:
        S = rng.choice([2, 3, 4, 6])
        c = _random_costs(rng, S, msg=rng.randint(0, 2_000_000))
        for name, M, P in [("pipedream", 1, 1), ("stale", 1, 1), ("local", 1, 1),
                           ("2bw", max(S - 1, 2), 1), ("gpipe", 4, 1), ("1f1b", 4, 1),
                           ("sequential", 1, 1), ("dp", 1, 4), ("pipe-sgd", 1, 4)]:
            r = simulate(costs=c, schedule=name, stages=S, microbatches=M, workers=P, hardware=hw,
                         keep_timeline=False)
            assert r.fast_iteration_time_s == pytest.approx(r.iteration_time_s, rel=0.01), \
                (name, S, M, hw.link)


def test_hybrid_fast_is_an_average_of_both_phases():
    c = uniform_costs(4, 2_000_000, 4_000_000)
    e = simulate(costs=c, schedule="hybrid", stages=4, batches=24)
    assert e.fast_iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)


def test_fast_method_skips_events_and_reports_fast_numbers():
    c = uniform_costs(4, 2_000_000, 4_000_000)
    r = simulate(costs=c, schedule="stale", stages=4, method="fast")
    assert r.timeline is None and r.method == "fast"
    assert r.iteration_time_s == pytest.approx(6e-3) and r.staleness == [6, 4, 2, 0]
    with pytest.raises(ValueError):
        r.trace_events()
