"""Event engine: replays the IR with resources; integer ns; FIFO resources."""

import random
from dataclasses import replace

import pytest
import simpy

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim.events import busy_in_window, compile_schedule, simulate_program
from stalesim.sim.model import SimHardware, StageCosts, uniform_costs


def run(name, costs, hw=None, **cfg):
    sched = build_schedule(ScheduleConfig(name, **cfg))
    return simulate_program(compile_schedule(sched), costs, hw or SimHardware.ideal())


def test_every_action_runs_once_in_device_order_and_respects_deps():
    from stalesim.schedule.deps import dependencies

    sched = build_schedule(ScheduleConfig("1f1b", stages=3, microbatches=4, batches=3))
    prog = compile_schedule(sched)
    costs = StageCosts((3, 5, 7), (6, 9, 4), (2, 2, 2), 1, (0,) * 3, (0,) * 3, (0,) * 3, 100, 4, 1)
    tl = simulate_program(prog, costs, SimHardware(device="x", link="l", latency_ns=3,
                                                   bandwidth_Bps=1e9))
    gid = {a.key: g for g, a in enumerate(prog.actions)}
    for _d, acts in enumerate(sched.device_actions):
        prev_end = 0
        for a in acts:
            g = gid[a.key]
            assert tl.start[g] >= prev_end and tl.end[g] >= tl.start[g]
            assert isinstance(tl.start[g], int) and isinstance(tl.end[g], int)
            prev_end = tl.end[g]
            for dep in dependencies(sched, a):
                assert tl.end[gid[dep]] <= tl.start[g] or a.kind.value.startswith("RECV")


def test_latency_and_bandwidth_alpha_beta():
    # 2 stages, sequential: F0 -> send -> F1 -> B1 -> send -> B0; message 1e6 B at 1e9 B/s = 1 ms
    hw = SimHardware(device="x", link="l", latency_ns=10_000, bandwidth_Bps=1e9)
    c = uniform_costs(2, 100_000, 200_000, msg_bytes=1_000_000)
    tl = run("sequential", c, hw, stages=2, batches=1)
    assert tl.makespan == 2 * 100_000 + 2 * 200_000 + 2 * (10_000 + 1_000_000)


def test_channel_contention_bus_vs_p2p():
    c = uniform_costs(4, 1_000_000, 2_000_000, msg_bytes=1_000_000)
    kw = {"device": "x", "link": "l", "latency_ns": 0, "bandwidth_Bps": 1e9}
    per = {}
    for topo in ("p2p", "nic", "bus"):
        tl = run("stale", c, SimHardware(**kw, topology=topo), stages=4, batches=48)
        per[topo] = (tl.batch_done[36] - tl.batch_done[12]) / 24
    # p2p: every direction of every link carries one 1 ms message per batch, hidden
    # behind the 3 ms of compute; nic: a middle device sends 2 ms per batch, still
    # hidden; bus: all 6 messages of a batch share one channel: 6 ms per batch
    assert per["p2p"] == pytest.approx(3_000_000, rel=1e-9)
    assert per["nic"] == pytest.approx(3_000_000, rel=1e-9)
    assert per["bus"] == pytest.approx(6_000_000, rel=1e-9)


def test_fifo_free_at_equals_simpy_resource():
    """The engine's 'free at' integer per resource is a FIFO simpy.Resource(1)
    when requests arrive in time order with fixed holding times."""
    rng = random.Random(3)
    reqs = sorted((rng.randint(0, 1000), rng.randint(1, 80)) for _ in range(300))
    env = simpy.Environment()
    res = simpy.Resource(env, capacity=1)
    grants = {}

    def user(i, t, hold):
        yield env.timeout(t)
        with res.request() as rq:
            yield rq
            grants[i] = env.now
            yield env.timeout(hold)

    for i, (t, h) in enumerate(reqs):
        env.process(user(i, t, h))
    env.run()
    free = 0
    for i, (t, h) in enumerate(reqs):
        start = max(t, free)
        free = start + h
        assert grants[i] == start


def test_dp_ring_allreduce_buckets_overlap_backward():
    # P=4 workers, each stage 1e6 param bytes; ring: 2(P-1)a + 2(P-1)/P n/b
    hw = SimHardware(device="x", link="l", latency_ns=10_000, bandwidth_Bps=1e9)
    c = uniform_costs(4, 2_000_000, 4_000_000, param_bytes=1_000_000)
    tl = run("dp", c, hw, stages=4, workers=4, batches=3)
    ar = 2 * 3 * 10_000 + 1_500_000
    assert hw.allreduce_ns(1_000_000, 4) == ar
    per = tl.batch_done[2] - tl.batch_done[1]
    assert per == 8_000_000 + 16_000_000 + ar  # only the last bucket is exposed


def test_pipe_sgd_hides_allreduce_until_comm_bound():
    hw = SimHardware(device="x", link="l", latency_ns=0, bandwidth_Bps=1e9)
    fast = uniform_costs(2, 1_000_000, 2_000_000, param_bytes=1_000_000)   # AR 1.5 ms/stage
    tl = run("pipe-sgd", fast, hw, stages=2, workers=4, batches=10)
    assert tl.batch_done[7] - tl.batch_done[6] == 6_000_000  # compute bound: max(6, 3)
    slow = uniform_costs(2, 1_000_000, 2_000_000, param_bytes=4_000_000)   # AR 6 ms/stage
    tl = run("pipe-sgd", slow, hw, stages=2, workers=4, batches=10)
    assert tl.batch_done[7] - tl.batch_done[6] == 12_000_000  # comm bound: 2 x 6 ms


def test_cpu_occupancy_takes_core_time():
    base = {"device": "x", "link": "l", "latency_ns": 0, "bandwidth_Bps": 1e9}
    c = uniform_costs(2, 1_000_000, 2_000_000, msg_bytes=1_000_000)
    gpu = run("local", c, SimHardware(**base), stages=2, batches=20)
    cpu = run("local", c, SimHardware(**base, comm_overlaps_compute=False,
                                          cpu_comm_occupancy=1.0), stages=2, batches=20)
    per_gpu = (gpu.batch_done[15] - gpu.batch_done[5]) / 10
    per_cpu = (cpu.batch_done[15] - cpu.batch_done[5]) / 10
    assert per_gpu == 3_000_000
    # the 1 ms activation message takes 1 ms of core on the sender and on the receiver
    assert per_cpu == pytest.approx(4_000_000, rel=1e-9)
    assert cpu.cpu_jobs and sum(e - s for _, s, e, _ in cpu.cpu_jobs) > 0


def test_a_receive_that_found_its_message_pays_its_arrival_and_one_that_blocked_does_not():
    """``arrival_ns``: the compute a message took from a receiver that computed while it came."""
    A = 50_000
    c = uniform_costs(2, 1_000_000, 2_000_000, msg_bytes=1000)
    c = replace(c, f_ns=(1_000_000, 2_000_000), b_ns=(1_000_000, 2_000_000))  # stage 1 the slower
    arr = c.with_overheads(arrival={"RECV_F": (0, A), "RECV_B": (A, A)})
    # sequential: every receive waits for its message: nothing charged
    assert run("sequential", arr, stages=2, batches=3).makespan == \
        run("sequential", c, stages=2, batches=3).makespan
    # gpipe, 4 micro-batches: stage 1 computes while micro-batches 1-3 arrive (3 x A on the
    # critical path); stage 0 waits for every gradient (blocked: 0)
    plain = run("gpipe", c, stages=2, microbatches=4, batches=1)
    with_arrival = run("gpipe", arr, stages=2, microbatches=4, batches=1)
    assert with_arrival.makespan - plain.makespan == 3 * A


def test_busy_in_window_and_compute_busy():
    c = uniform_costs(4, 250_000, 500_000)
    tl = run("gpipe", c, stages=4, microbatches=8, batches=4)
    assert tl.compute_busy == [4 * 8 * 750_000] * 4
    lo, hi = tl.batch_done[1], tl.batch_done[3]
    assert busy_in_window(tl, lo, hi) == [2 * 8 * 750_000] * 4


def test_folded_devices_and_baseline_equals_sum():
    # sequential on one device == the sum the speed-up baseline uses
    c = StageCosts((3, 5, 7), (6, 9, 4), (2, 1, 2), 0, (9,) * 3, (0,) * 3, (0,) * 3, 0, 1, 1)
    hw = SimHardware(device="x", link="l", latency_ns=1000, bandwidth_Bps=1.0)
    tl = run("sequential", c, hw, stages=3, fold=1, batches=3)
    assert tl.makespan == 3 * (3 + 5 + 7 + 6 + 9 + 4 + 2 + 1 + 2)  # no link on one device
    tl2 = run("pipedream", c, SimHardware.ideal(), stages=3, fold=2, batches=30)
    assert len(tl2.compute_busy) == 2


def test_simpy_clock_ends_at_makespan():
    c = uniform_costs(3, 7, 11)
    tl = run("stale", c, stages=3, batches=5)
    assert tl.makespan == max(tl.end)
