"""Per-edge communicators, the sender-order posting plan, and NCCL's ordering checked on CPU.

Every registered schedule at S in {2, 3, 4} devices (V = 2 chunks where it has virtual
stages, folded and not, dp / pipe-sgd with workers) passes the NCCL simulation with the
executor's layout and plan; the layout before per-edge groups (one group per channel,
receives in list order) hangs on the schedules where a rank pair talks both ways.
"""

from __future__ import annotations

import pytest
from _equivalence import micro_for

from stalesim.executor.rank import RECV_AHEAD  # the look-ahead the executor (and so the memory model) uses
from stalesim.schedule import Kind, ScheduleConfig, build_schedule, get_spec, schedule_names
from stalesim.schedule.comm import (
    ACT,
    GRAD,
    Edge,
    edge_of,
    edges,
    label_carriers,
    posting_plan,
    posting_sequence,
    receive_order_matches_send_order,
)
from stalesim.schedule.comm_check import CommOrderError, check_comm_order
from stalesim.schedule.completion import send_release


def _cases() -> list[tuple[str, ScheduleConfig]]:
    out = []
    for name in schedule_names():
        spec = get_spec(name)
        for S in (2, 3, 4):
            if spec.data_parallel:
                for st in (1, 2):
                    out.append((f"{name}-P{S}-S{st}", ScheduleConfig(name, stages=st, batches=5, workers=S)))
                continue
            st = S * spec.stages_per_device
            m = micro_for(name, st, S)
            out.append((f"{name}-D{S}", spec.config(stages=st, batches=5, microbatches=m)))
            if spec.stages_per_device == 1 and S >= 3:  # folded: S stages on S - 1 devices
                out.append((f"{name}-D{S}-fold", spec.config(stages=S, batches=5, microbatches=m,
                                                            fold=S - 1)))
            elif spec.stages_per_device > 1 and not spec.fixed_stages_per_device and S >= 3:
                out.append((f"{name}-D{S}-fold", spec.config(stages=st, batches=5, microbatches=m,
                                                            fold=S - 1)))
    return out


CASES = _cases()


@pytest.mark.parametrize("label,cfg", CASES, ids=[c[0] for c in CASES])
def test_every_registered_schedule_passes_nccl_ordering(label: str, cfg: ScheduleConfig) -> None:
    sched = build_schedule(cfg)
    for ahead in (0, 1, RECV_AHEAD):
        check_comm_order(sched, posting_plan(sched, recv_ahead=ahead))
    # and its receives already come in the sender's order on every edge: the plan equals
    # "the next recv_ahead receives of the list", so results are unchanged by the plan
    assert receive_order_matches_send_order(sched), label
    for d in range(sched.num_devices):
        assert posting_sequence(sched, d) == posting_sequence(sched, d, order="list")


def test_the_cases_cover_the_registry_folds_and_virtual_stages() -> None:
    names = {cfg.schedule for _, cfg in CASES}
    assert names == set(schedule_names())
    assert any(label.endswith("fold") for label, _ in CASES)
    built = [build_schedule(cfg) for _, cfg in CASES]
    assert any(s.stages_per_device == 2 and s.num_devices * 2 == s.stages for s in built)
    assert any(s.stages_per_device == 2 and s.num_devices * 2 < s.stages for s in built)  # folded


def _legacy(sched):
    """The layout before per-edge groups: a group per channel for all ranks, receives
    posted 8 ahead in list order."""
    return posting_plan(sched, recv_ahead=RECV_AHEAD, order="list"), (lambda e: e.channel)


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-v", "dualpipev"])
def test_the_legacy_layout_hangs_where_a_pair_talks_both_ways(name: str) -> None:
    spec = get_spec(name)
    st = 2 * spec.stages_per_device
    sched = build_schedule(spec.config(stages=st, batches=4, microbatches=micro_for(name, st, 2)))
    plan, group_of = _legacy(sched)
    with pytest.raises(CommOrderError) as err:
        check_comm_order(sched, plan, group_of)
    msg = str(err.value)
    # both ranks wait on an activation receive; the peer's head of that communicator is a
    # receive too (rank 0's own send is queued behind its receive)
    assert set(err.value.stuck) == {0, 1}
    assert "rank 0 stuck at action" in msg and "RECV_F" in msg
    assert "rank 1's head there: receive of data" in msg
    # the per-edge layout with the same (list-order) posting runs
    check_comm_order(sched, plan)


def test_the_legacy_layout_survives_where_every_pair_talks_one_way_per_channel() -> None:
    """ProcessGroupNCCL keeps one communicator per rank pair of a group
    (``getKeySendRecv``), so 1F1B's middle stage (receives from 0, sends to 2 on the
    activation group) does not queue a receive ahead of its own send: plain 1F1B on 3
    ranks, and interleaving on 3 ranks (a ring), ran under the old layout too."""
    for name, st in (("1f1b", 3), ("interleaved-1f1b", 6)):
        spec = get_spec(name)
        sched = build_schedule(spec.config(stages=st, batches=4, microbatches=3))
        check_comm_order(sched, *_legacy(sched))


def test_a_receive_posted_out_of_the_senders_order_is_a_mismatch() -> None:
    sched = build_schedule(get_spec("gpipe").config(stages=2, batches=1, microbatches=2))
    plan = posting_plan(sched, recv_ahead=RECV_AHEAD)
    acts = sched.device_actions[1]
    first = plan.before[1][0]
    assert len(first) >= 2 and all(acts[r].kind is Kind.RECV_F for r in first[:2])
    swapped = (first[1], first[0], *first[2:])
    bad = type(plan)(plan.recv_ahead, plan.order, (plan.before[0], {**plan.before[1], 0: swapped}),
                     plan.post_at)
    with pytest.raises(CommOrderError, match="pair the wrong messages"):
        check_comm_order(sched, bad, release=send_release(sched, plan=plan))


def test_edges_are_directed_per_channel_and_sorted() -> None:
    sched = build_schedule(get_spec("interleaved-1f1b").config(stages=4, batches=1, microbatches=2))
    assert edges(sched) == [Edge(0, 1, ACT), Edge(0, 1, GRAD), Edge(1, 0, ACT), Edge(1, 0, GRAD)]
    for d, acts in enumerate(sched.device_actions):
        for a in acts:
            if a.kind in (Kind.SEND_F, Kind.SEND_B):
                assert edge_of(sched, a).src == d
            elif a.kind in (Kind.RECV_F, Kind.RECV_B):
                assert edge_of(sched, a).dst == d
    dp = build_schedule(ScheduleConfig("dp", stages=2, batches=2, workers=3))
    assert edges(dp) == []


def test_plan_keeps_recv_ahead_posted_and_forces_a_needed_receive() -> None:
    sched = build_schedule(get_spec("gpipe").config(stages=2, batches=2, microbatches=4))
    acts = sched.device_actions[1]
    recvs = [i for i, a in enumerate(acts) if a.kind in (Kind.RECV_F, Kind.RECV_B)]
    plan = posting_plan(sched, recv_ahead=3)
    assert plan.before[1][0] == tuple(recvs[:3])  # the first three before the first action
    # after the first receive runs, the fourth is posted right before the next action
    assert plan.post_at[1][recvs[3]] == recvs[0] + 1
    for i in range(len(acts)):
        assert len(plan.posted_after(1, i)) <= 3
    none_ahead = posting_plan(sched, recv_ahead=0)
    assert all(none_ahead.post_at[1][r] == r for r in recvs)  # posted right before its RECV


def test_label_carriers_are_the_first_per_batch() -> None:
    sched = build_schedule(get_spec("gpipe").config(stages=2, batches=2, microbatches=2))
    acts = sched.device_actions[0]
    carriers = sorted(label_carriers(acts))
    assert [str(acts[i]) for i in carriers] == ["0SEND_F0.0", "0SEND_F1.0"]


def test_send_release_from_a_plan_equals_the_recv_ahead_form() -> None:
    for name in ("1f1b", "local", "zb-v"):
        spec = get_spec(name)
        st = 3 * spec.stages_per_device
        sched = build_schedule(spec.config(stages=st, batches=4, microbatches=micro_for(name, st, 3)))
        plan = posting_plan(sched, recv_ahead=4)
        assert send_release(sched, plan=plan) == send_release(sched, recv_ahead=4)
