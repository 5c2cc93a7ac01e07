"""Cluster simulation: the symmetric shortcut equals the full event simulation, to the ns.

The full simulation runs every replica and every batch through the same engine
(``SimOptions(symmetry=False)``); the shortcut runs one representative per
replica class over a short run and extrapolates its period. Every reported
number must be identical (integer nanoseconds underneath; the floats are the
same divisions of the same integers), so the assertions use ``==``.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.schedule import ScheduleConfig
from stalesim.sim import SimHardware, SimOptions, StageCosts, simulate, uniform_costs
from stalesim.sim.model import SimCluster

FIELDS = ("iteration_time_s", "makespan_s", "mean_iteration_time_s", "fill_drain_s", "utilization",
          "bubble_fraction", "peak_memory_bytes", "memory_breakdown", "allreduce_s", "allreduce_exposed_s",
          "phases", "steady_window", "device_roles", "staleness", "versions", "devices", "workers", "batches")


def random_costs(S: int, seed: int) -> StageCosts:
    r = random.Random(seed)
    f = tuple(r.randint(200_000, 2_000_000) for _ in range(S))
    return StageCosts(f, tuple(2 * x + r.randint(0, 300_000) for x in f),
                      tuple(r.randint(0, 200_000) for _ in range(S)), 50_000,
                      tuple(r.randint(10**5, 10**7) for _ in range(S)),
                      tuple(r.randint(10**6, 4 * 10**8) for _ in range(S)),
                      tuple(r.randint(10**6, 10**8) for _ in range(S)), 10**9, 64, 4)


def cluster_hw(G: int = 4, topology: str = "p2p", algorithm: str = "ring") -> SimHardware:
    return SimHardware(device="gpu", link="nvlink", latency_ns=3_000, bandwidth_Bps=4.5e11, topology=topology,
                       cluster=SimCluster(node_size=G, inter_link="net", inter_latency_ns=20_000,
                                          inter_bandwidth_Bps=5e9, inter_algorithm=algorithm))


def both(costs, cfg, hw, **kw):
    short = simulate(costs, cfg, hw, SimOptions(keep_timeline=False, **kw))
    full = simulate(costs, cfg, hw, SimOptions(keep_timeline=False, symmetry=False, **kw))
    return short, full


def assert_same(short, full) -> None:
    for f in FIELDS:
        assert getattr(short, f) == getattr(full, f), f
    assert short.method == "symmetric" and full.method == "event"


CASES = [  # (schedule, stages, micro-batches, batches, extra config), all with enough batches to extrapolate
    ("1f1b", 3, 4, 40, {}),
    ("gpipe", 3, 3, 40, {}),
    ("pipedream", 3, 1, 120, {}),
    ("stale", 3, 1, 120, {"warmup": 5}),
    ("2bw", 3, 4, 60, {}),
    ("1f1b", 4, 4, 40, {"fold": 2}),
    ("sequential", 3, 1, 30, {}),
    ("hybrid", 3, 1, 30, {}),  # no steady state: simulated in full, replicas still by symmetry
]


@pytest.mark.parametrize("name,S,M,N,extra", CASES)
def test_shortcut_equals_full_simulation(name, S, M, N, extra) -> None:
    # 5 replicas of 3 devices on nodes of 4, pipeline placement: three replica classes
    # (0,1,2 on one node; 3 | 4,5; 6,7 | 8; then 9,10,11 and 12,13,14 like the first)
    cfg = ScheduleConfig(name, stages=S, microbatches=M, batches=N, **extra)
    short, full = both(random_costs(S, 1), cfg, cluster_hw(), replicas=5, bucket_bytes=30_000_000)
    assert_same(short, full)
    assert full.symmetry["representatives_simulated"] == 5
    assert short.symmetry["replica_classes"] == (3 if "fold" not in extra else 1)
    if name != "hybrid":
        assert short.symmetry["extrapolated"] and short.symmetry["batches_simulated"] < N
    assert sum(r["devices"] for r in short.device_roles) == short.devices


@pytest.mark.parametrize("placement", ["pipeline", "data"])
@pytest.mark.parametrize("topology", ["p2p", "nic"])
def test_shortcut_equals_full_across_layouts(placement, topology) -> None:
    cfg = ScheduleConfig("1f1b", stages=4, microbatches=4, batches=30)
    for P, G in ((4, 4), (3, 8), (6, 2)):
        short, full = both(random_costs(4, P + G), cfg, cluster_hw(G, topology, "tree"), replicas=P,
                           placement=placement)
        assert_same(short, full)


def test_data_parallel_schedules_on_a_cluster() -> None:
    for name, extra in (("dp", {}), ("pipe-sgd", {"warmup": 2})):
        cfg = ScheduleConfig(name, stages=4, workers=5, batches=30, **extra)
        short, full = both(random_costs(4, 7), cfg, cluster_hw(2), bucket_bytes=50_000_000)
        assert_same(short, full)
        assert short.symmetry["representatives_simulated"] == 2 and len(short.device_roles) == 1
        assert short.device_roles[0]["devices"] == 5


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shortcut_equals_full_random_grid(seed) -> None:
    r = random.Random(seed)
    names = [("1f1b", 4), ("gpipe", 3), ("pipedream", 1), ("stale", 1), ("2bw", 4), ("local", 1)]
    for name, M in names:
        S = r.randint(2, 4)
        P = r.randint(2, 5)
        G = r.choice([2, 3, 4, 8])
        cfg = ScheduleConfig(name, stages=S, microbatches=max(M, S - 1) if M > 1 else 1, batches=r.randint(30, 90))
        hw = cluster_hw(G, r.choice(["p2p", "nic"]), r.choice(["ring", "tree"]))
        short, full = both(random_costs(S, r.randint(0, 99)), cfg, hw, replicas=P,
                           placement=r.choice(["pipeline", "data"]),
                           bucket_bytes=r.choice([None, 20_000_000]))
        assert_same(short, full)


def test_one_replica_on_one_node_equals_the_plain_event_path() -> None:
    plain = SimHardware(device="gpu", link="l", latency_ns=30_000, bandwidth_Bps=4.5e9)
    node = replace(plain, cluster=SimCluster(node_size=64, inter_link="net", inter_latency_ns=1,
                                             inter_bandwidth_Bps=1e9))
    for name, M, extra in (("1f1b", 4, {}), ("stale", 1, {"warmup": 3}), ("2bw", 4, {}), ("hybrid", 1, {})):
        cfg = ScheduleConfig(name, stages=4, microbatches=M, batches=60, **extra)
        c = random_costs(4, 3)
        a = simulate(c, cfg, plain, SimOptions(keep_timeline=False))
        b = simulate(c, cfg, node, SimOptions(keep_timeline=False))
        for f in ("iteration_time_s", "makespan_s", "utilization", "peak_memory_bytes", "fill_drain_s",
                  "bubble_fraction", "staleness"):
            assert getattr(a, f) == getattr(b, f), (name, f)
    cfg = ScheduleConfig("dp", stages=3, workers=4, batches=8)  # dp: the flat ring = one node's ring
    a = simulate(random_costs(3, 4), cfg, plain, SimOptions(keep_timeline=False))
    b = simulate(random_costs(3, 4), cfg, node, SimOptions(keep_timeline=False))
    assert a.iteration_time_s == b.iteration_time_s and a.makespan_s == b.makespan_s


def test_allreduce_exposed_and_buckets_closed_form() -> None:
    """One stage, two replicas: F, B, then the all-reduce A fully exposed, then U.
    With K equal buckets, bucket j is ready (K-1-j)/K of B before B ends; when A/K <= B/K
    only the last bucket is exposed: F + B + A/K + U."""
    F, B, U, K = 1_000_000, 2_000_000, 100_000, 4
    c = uniform_costs(1, F, B, U, param_bytes=400_000_000)
    hw = SimHardware(device="gpu", link="l", latency_ns=0, bandwidth_Bps=4e11)  # A = 2(P-1)/P n / b = 1 ms
    A = 1_000_000
    cfg = ScheduleConfig("sequential", stages=1, batches=12)
    r = simulate(c, cfg, hw, SimOptions(replicas=2))
    assert r.allreduce_s == [A / 1e9] and r.allreduce_exposed_s == [A / 1e9]
    assert r.iteration_time_s == (F + B + A + U) / 1e9
    r = simulate(c, cfg, hw, SimOptions(replicas=2, bucket_bytes=100_000_000))
    assert r.allreduce_s == [A / 1e9] and r.allreduce_exposed_s == [A / K / 1e9]
    assert r.iteration_time_s == (F + B + A // K + U) / 1e9


def test_the_4096_device_configuration_is_small_to_simulate() -> None:
    """P = 512 x S = 8, M = 64 on DGX H100 nodes: one replica, a short run, extrapolated."""
    from stalesim.workloads.hardware import hardware_from_node

    hw = SimHardware.from_hardware(hardware_from_node("dgx-h100"))
    c = uniform_costs(8, 5_000_000, 10_000_000, 2_000_000, msg_bytes=16 * 2**20, param_bytes=2 * 10**9,
                      batch_size=32768, action_batch=1)
    r = simulate(c, ScheduleConfig("1f1b", stages=8, microbatches=64, batches=1000), hw,
                 SimOptions(replicas=512, bucket_bytes=25 * 2**20, keep_timeline=False))
    assert r.devices == 4096 and len(r.utilization) == 8 and len(r.device_roles) == 8
    assert all(role["devices"] == 512 for role in r.device_roles)
    y = r.symmetry
    assert y["representatives_simulated"] == 1 and y["extrapolated"] and y["batches_simulated"] <= 16
    # pipeline placement: one replica per node, so each stage's group has one member on each of 512 nodes
    assert r.cluster["allreduce_groups"][0] == {"members": 512, "nodes": 512, "max_per_node": 1,
                                                 "min_per_node": 1}
    assert r.iteration_time_s >= (64 + 7) * 15e-3  # at least the 1F1B flush


def test_bad_cluster_requests_are_one_line_errors() -> None:
    c = uniform_costs(2, 1000, 2000)
    cfg = ScheduleConfig("1f1b", stages=2, microbatches=2, batches=8)
    with pytest.raises(StalesimError, match="^topology: bus"):
        simulate(c, cfg, replace(cluster_hw(), topology="bus"), SimOptions(replicas=2))
    with pytest.raises(StalesimError, match="^replicas: 'dp' is data-parallel"):
        simulate(c, ScheduleConfig("dp", stages=2, workers=2), None, SimOptions(replicas=2))
    for kw, field in (({"replicas": 0}, "replicas"), ({"bucket_bytes": 0}, "bucket_bytes"),
                      ({"placement": "random"}, "placement")):
        with pytest.raises(StalesimError, match=f"^{field}:"):
            simulate(c, cfg, None, SimOptions(**kw))
    from stalesim.workloads.profile import uniform_profile

    with pytest.raises(StalesimError, match="^batch_size: 100 is not divisible by replicas x microbatches"):
        simulate(uniform_profile(4, 1e-3, 2e-3, batch_size=100), cfg, None, SimOptions(replicas=3))
    big = ScheduleConfig("1f1b", stages=8, microbatches=64, batches=100)
    with pytest.raises(StalesimError, match="^symmetry: simulating every replica"):
        simulate(uniform_costs(8, 1000, 2000), big, None, SimOptions(replicas=512, symmetry=False))


def test_periods_longer_than_one_batch_and_uneven_lengths() -> None:
    """A latency-bound PipeDream (one replica on a node: no all-reduce) repeats every 4 batches;
    N - n not a multiple of 4 makes the shortcut run a few batches more so that only whole
    periods are inserted."""
    hw = replace(cluster_hw(8), latency_ns=5_000, bandwidth_Bps=2e10)
    c = uniform_costs(4, 100_000, 200_000, 10_000, msg_bytes=100_000, param_bytes=10**6)
    for N in (101, 102, 103):
        short, full = both(c, ScheduleConfig("pipedream", stages=4, batches=N), hw, replicas=1)
        assert_same(short, full)
        assert short.symmetry["period_batches"] == 4 and short.symmetry["extrapolated"]
        assert (N - short.symmetry["batches_simulated"]) % 4 == 0
