"""Cluster layout, replica classes, the replicated IR and the hierarchical all-reduce."""

from __future__ import annotations

import math

import pytest

from stalesim.errors import StalesimError
from stalesim.schedule import ScheduleConfig, build_schedule, dry_run, validate
from stalesim.schedule.actions import Kind
from stalesim.sim import SimHardware, uniform_costs
from stalesim.sim.cluster import Layout, comm_plan, replicate, send_pairs, with_cluster
from stalesim.sim.model import SimCluster
from stalesim.workloads.hardware import hardware_from_node


def test_layout_placements_and_groups() -> None:
    pipe = Layout(replicas=4, per_replica=2, node_size=4, placement="pipeline")
    assert [pipe.global_device(r, d) for r in range(4) for d in range(2)] == list(range(8))
    assert pipe.nodes == 2 and pipe.node(1, 1) == 0 and pipe.node(2, 0) == 1
    assert sorted(pipe.group_per_node(0)) == [2, 2]  # two replicas per node
    data = Layout(replicas=4, per_replica=2, node_size=4, placement="data")
    assert data.global_device(1, 1) == 5 and data.group_per_node(0) == [4] and data.group_per_node(1) == [4]
    assert Layout(3, 2).nodes == 1 and Layout(3, 2).group_per_node(1) == [3]
    with pytest.raises(StalesimError, match="^placement:"):
        Layout(2, 2, placement="zigzag")
    with pytest.raises(StalesimError, match="^replicas:"):
        Layout(0, 2)


def test_replica_classes_follow_node_boundaries() -> None:
    pairs = [(0, 1), (1, 2), (1, 0), (2, 1)]
    lay = Layout(replicas=5, per_replica=3, node_size=4)  # devices 0-2 | 3,4-5 | 6-7,8 | 9-11 | 12-14
    assert lay.classes(pairs) == [(0, 3), (1, 1), (2, 1)]
    assert Layout(8, 4, node_size=8).classes(pairs[:2]) == [(0, 8)]  # pipelines inside nodes: one class
    assert Layout(8, 4, node_size=2).classes(pairs[:2]) == [(0, 8)]  # every pipeline crosses the same way
    # data placement g = 4d + r on nodes of 6: replicas 0, 1 cross after device 1, replicas 2, 3 after 0
    assert Layout(4, 3, node_size=6, placement="data").classes(pairs[:2]) == [(0, 2), (2, 2)]


def test_replicated_ir_is_a_valid_schedule() -> None:
    base = build_schedule(ScheduleConfig("1f1b", stages=3, microbatches=2, batches=4))
    full = replicate(base, 3, allreduce=True)
    validate(full)
    dry_run(full)
    assert full.workers == 3 and full.num_devices == 9 and full.placement[2] == [6, 7, 8]
    assert full.versions is not None and full.versions.v_f(1, 3, 1, worker=2) == base.versions.v_f(1, 3, 1)
    for acts in full.device_actions:
        kinds = [a.kind for a in acts]
        assert kinds.count(Kind.AR) == kinds.count(Kind.ARW) == kinds.count(Kind.U) == 4
        for i, a in enumerate(acts):
            if a.kind is Kind.ARW:
                assert acts[i + 1].kind is Kind.U and acts[i + 1].batch == a.batch
            if a.kind is Kind.AR:  # right after the stage's last backward of the batch
                assert acts[i - 1].kind in (Kind.B, Kind.SEND_B) and acts[i - 1].batch == a.batch
    one = replicate(base, 1, allreduce=True)
    assert one.workers == 1 and one.versions is base.versions
    assert replicate(base, 1, allreduce=False) is base
    assert send_pairs(base) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    with pytest.raises(StalesimError, match="^replicas:"):
        replicate(full, 2, allreduce=True)


def test_hierarchical_allreduce_model() -> None:
    hw = SimHardware.from_hardware(hardware_from_node("dgx-h100"))
    c = hw.cluster
    assert c is not None and c.node_size == 8
    n = 1e9
    a_i, b_i, a_e, b_e = 3_000, 450e9, 1_500, 50e9
    # one node: the flat ring over the link; one member per node: the flat ring over the network
    assert hw.group_allreduce_ns(n, [8]) == hw.allreduce_ns(n, 8) == 14 * a_i + round(14 / 8 * n / b_i * 1e9)
    assert hw.group_allreduce_ns(n, [1] * 16) == 30 * a_e + round(30 / 16 * n / b_e * 1e9)
    # 8 per node on 4 nodes: reduce-scatter/all-gather inside, each 1/8 shard across the 4 nodes
    want = 14 * a_i + round(14 / 8 * n / b_i * 1e9) + 6 * a_e + round(6 / 4 * n / 8 / b_e * 1e9)
    assert hw.group_allreduce_ns(n, [8, 8, 8, 8]) == want
    # the float model of the hardware description says the same (to rounding)
    spec = hardware_from_node("dgx-h100").cluster
    assert spec.allreduce_time(n, [8, 8, 8, 8]) == pytest.approx(want / 1e9, abs=2e-9)
    # uneven groups: k = largest share inside, the smallest share sets the shard size
    assert hw.group_allreduce_ns(n, [8, 4]) == 14 * a_i + round(14 / 8 * n / b_i * 1e9) + 2 * a_e + \
        round(n / 4 / b_e * 1e9)
    tree = with_cluster(hw, inter_algorithm="tree")
    assert tree.group_allreduce_ns(n, [1] * 16) == 8 * a_e + round(8 * n / b_e * 1e9)
    assert hw.group_allreduce_ns(n, [1]) == 0
    no_cluster = SimHardware(device="x", link="l", latency_ns=10, bandwidth_Bps=1e9)
    assert no_cluster.group_allreduce_ns(n, [2, 3]) == no_cluster.allreduce_ns(n, 5)


def test_comm_plan_buckets_rings_and_nodes() -> None:
    base = build_schedule(ScheduleConfig("gpipe", stages=4, microbatches=2, batches=2, fold=2))
    lay = Layout(replicas=4, per_replica=2, node_size=2, placement="data")
    sched = replicate(base, 2, allreduce=True)
    hw = SimHardware.from_hardware(hardware_from_node("dgx-h100"))
    costs = uniform_costs(4, 1000, 2000, msg_bytes=10**6, param_bytes=10**8)
    plan = comm_plan(sched, lay, [0, 3], costs, hw, bucket_bytes=3 * 10**7,
                     stage_slot=[base.device_of(s) for s in range(4)])
    assert plan.node_of == (0, 2, 1, 3)  # data placement: g = d P + r
    assert plan.ar_ring == (0, 0, 1, 1) and plan.members == 2
    k = math.ceil(10**8 / (3 * 10**7))
    assert all(len(b) == k and len(set(b)) == 1 for b in plan.ar_buckets)
    assert plan.ar_buckets[0][0] == hw.group_allreduce_ns(10**8 / k, [2, 2])
    assert plan.inter_ser[0] == hw.cluster.serialize_ns(10**6) and plan.inter_latency_ns == 1_500


def test_with_cluster_overrides_and_errors() -> None:
    hw = SimHardware(device="x", link="nvlink4", latency_ns=3000, bandwidth_Bps=4.5e11)
    assert with_cluster(hw) is hw
    c = with_cluster(hw, node_size=4, inter_link="ib-hdr").cluster
    assert c == SimCluster(node_size=4, inter_link="ib-hdr", inter_latency_ns=1500, inter_bandwidth_Bps=25e9)
    node = with_cluster(hw, node="dgx-a100", node_size=16).cluster
    assert node.node_size == 16 and node.inter_link == "ib-hdr"
    assert with_cluster(with_cluster(hw, node="dgx-h100"), node_size=2).cluster.inter_link == "ib-ndr"
    with pytest.raises(StalesimError, match="^inter_link: a cluster needs both"):
        with_cluster(hw, node_size=8)
    with pytest.raises(StalesimError, match="^inter_algorithm: needs a cluster"):
        with_cluster(hw, inter_algorithm="tree")
    with pytest.raises(StalesimError, match="^link: unknown 'warp-drive'"):
        with_cluster(hw, node_size=8, inter_link="warp-drive")
    with pytest.raises(StalesimError, match="^cluster.node_size:"):
        SimCluster(node_size=0, inter_link="x")
