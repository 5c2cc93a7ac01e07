"""Fast path vs event path: exact on uniform stages with an ideal link, within 1%
in steady state on random non-uniform stages (ideal link and small latency)."""

import random

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule, get_spec
from stalesim.sim import SimHardware, SimOptions, simulate
from stalesim.sim.fastpath import fast_iteration
from stalesim.sim.model import StageCosts, uniform_costs


def cfg(name, S, M=1, P=1, **kw):
    """The same shape for every schedule (micro-batches/workers only where they apply)."""
    return get_spec(name).config(stages=S, microbatches=M, workers=P, **kw)


def fast(name, c, hw, S=None, M=1, P=1):
    """The closed form alone, on a short build of the configuration."""
    S = S or c.stages
    return fast_iteration(build_schedule(cfg(name, S, M, P, batches=2 * S + 4)), c, hw)

CASES = [("sequential", 1, 1), ("gpipe", 1, 1), ("gpipe", 4, 1), ("gpipe", 8, 1), ("1f1b", 2, 1),
         ("1f1b", 8, 1), ("pipedream", 1, 1), ("stale", 1, 1), ("local", 1, 1), ("2bw", 4, 1),
         ("2bw", 8, 1), ("dp", 1, 4), ("pipe-sgd", 1, 4)]


@pytest.mark.parametrize("name,M,P", CASES)
@pytest.mark.parametrize("S", [2, 4, 5])
def test_uniform_ideal_agree_exactly(name, M, P, S):
    if name == "2bw" and M < S - 1:
        pytest.skip("2bw needs M >= S-1")
    c = uniform_costs(S, 300_000, 700_000, 50_000, batch_size=64, action_batch=64 // M)
    r = simulate(c, cfg(name, S, M, P))
    assert r.fast_iteration_time_s == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_uniform_closed_forms():
    S, M, F, B = 4, 8, 250_000, 500_000
    hw = SimHardware.ideal()
    c = uniform_costs(S, F, B)
    assert fast("gpipe", c, hw, M=M).iteration_ns == (M + S - 1) * (F + B)
    assert fast("1f1b", c, hw, M=M).iteration_ns == (M + S - 1) * (F + B)
    assert fast("pipedream", c, hw).iteration_ns == F + B
    assert fast("stale", c, hw).iteration_ns == F + B


def test_a_receives_arrival_cost_is_folded_into_its_action_like_its_cpu_cost():
    """The closed form cannot tell a receive that blocked from one that did not: it charges
    ``arrival_ns`` to every receive, as it does the receive's own CPU cost."""
    c = uniform_costs(2, 250_000, 500_000)
    table = {"RECV_F": (0, 30_000), "RECV_B": (30_000, 30_000)}
    hw = SimHardware.ideal()
    as_arrival = fast("1f1b", c.with_overheads(arrival=table), hw, M=4).iteration_ns
    as_cpu = fast("1f1b", c.with_overheads(comm=table), hw, M=4).iteration_ns
    assert as_arrival == as_cpu > fast("1f1b", c, hw, M=4).iteration_ns


def test_ring_allreduce_and_pipe_sgd_formulas():
    hw = SimHardware(device="x", link="l", latency_ns=5_000, bandwidth_Bps=1e10)
    n, P = 40_000_000, 4
    ring = 2 * (P - 1) * 5_000 + round(2 * (P - 1) / P * n / 1e10 * 1e9)
    assert hw.allreduce_ns(n, P) == ring
    c = uniform_costs(2, 1_000_000, 2_000_000, param_bytes=n // 2)
    t_comp, t_comm = 6_000_000, 2 * hw.allreduce_ns(n // 2, P)
    ps = fast("pipe-sgd", c, hw, P=P)
    assert ps.iteration_ns == max(t_comp, t_comm)
    assert ps.terms["synchronous_ns"] == t_comp + t_comm
    dp = fast("dp", c, hw, P=P)
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
            r = simulate(c, cfg(name, S, M, P), hw, SimOptions(keep_timeline=False))
            assert r.fast_iteration_time_s == pytest.approx(r.iteration_time_s, rel=0.01), \
                (name, S, M, hw.link)


def test_hybrid_fast_is_an_average_of_both_phases():
    c = uniform_costs(4, 2_000_000, 4_000_000)
    e = simulate(c, ScheduleConfig("hybrid", stages=4, batches=24))
    assert e.fast_iteration_time_s == pytest.approx(e.iteration_time_s, rel=1e-9)
    assert e.steady_window == [] and e.iteration_time_s == pytest.approx(e.mean_iteration_time_s)
    # with a warm-up: three phases, still exact
    w = simulate(c, ScheduleConfig("hybrid", stages=4, batches=24, warmup=3, switch=14))
    assert [p["schedule"] for p in w.phases] == ["sequential", "hybrid", "sequential"]
    assert w.fast_iteration_time_s == pytest.approx(w.iteration_time_s, rel=1e-9)


def test_fast_method_skips_events_and_reports_fast_numbers():
    c = uniform_costs(4, 2_000_000, 4_000_000)
    r = simulate(c, ScheduleConfig("stale", stages=4), options=SimOptions(method="fast"))
    assert r.timeline is None and r.method == "fast"
    assert r.iteration_time_s == pytest.approx(6e-3) and r.staleness == [6, 4, 2, 0]
    with pytest.raises(ValueError):
        r.trace_events()


@pytest.mark.parametrize("name,M,P", [("stale", 1, 1), ("pipedream", 1, 1), ("2bw", 4, 1),
                                      ("pipe-sgd", 1, 2)])
def test_warmup_changes_the_prediction_exactly_as_the_warmup_batches_cost(name, M, P):
    """A synchronous warm-up of K batches, then the schedule: the event simulation's makespan
    is the K synchronous batches' plus the rest's, the steady state is the schedule's own,
    and the fast path accounts for the warm-up the same way."""
    S, K, N = 4, 5, 40
    c = uniform_costs(S, 300_000, 700_000, 50_000, batch_size=64, action_batch=64 // M,
                      param_bytes=4_000_000, msg_bytes=100_000)
    hw = SimHardware(device="x", link="l", latency_ns=20_000, bandwidth_Bps=1e10)
    spec = get_spec(name)
    warm = simulate(c, cfg(name, S, M, P, batches=N, warmup=K), hw)
    sync = simulate(c, cfg(spec.warmup_with, S, M, P, batches=K), hw)
    rest = simulate(c, cfg(name, S, M, P, batches=N - K), hw)
    plain = simulate(c, cfg(name, S, M, P, batches=N), hw)
    assert warm.makespan_s == pytest.approx(sync.makespan_s + rest.makespan_s, rel=1e-12)
    assert warm.makespan_s > plain.makespan_s
    assert [p["schedule"] for p in warm.phases] == [spec.warmup_with, name]
    assert warm.phases[0]["end_s"] == pytest.approx(sync.makespan_s, rel=1e-12)
    assert warm.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-3)  # windows differ
    assert warm.steady_window[0] >= K  # the window never includes warm-up batches
    fw = simulate(c, cfg(name, S, M, P, batches=N, warmup=K), hw, SimOptions(method="fast"))
    fp = simulate(c, cfg(name, S, M, P, batches=N), hw, SimOptions(method="fast"))
    assert fw.makespan_s - fp.makespan_s == pytest.approx(
        K * (sync.iteration_time_s - fp.iteration_time_s), rel=1e-9)
