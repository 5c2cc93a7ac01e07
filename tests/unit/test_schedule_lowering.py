"""Lowering: sends/receives exactly where consecutive stages sit on different devices."""

from __future__ import annotations

from dataclasses import replace

from stalesim.schedule import Kind, ScheduleConfig, build_schedule, lower

P2P = (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B)


def test_sends_only_across_devices() -> None:
    sched = build_schedule(ScheduleConfig("gpipe", stages=4, microbatches=2, batches=1, fold=2))
    assert sched.placement == [[0, 0, 1, 1]]
    kinds = [str(a) for a in sched.actions() if a.kind in P2P]
    assert sorted(kinds) == sorted(["1SEND_F0.0", "1SEND_F0.1", "2RECV_F0.0", "2RECV_F0.1",
                                    "2SEND_B0.0", "2SEND_B0.1", "1RECV_B0.0", "1RECV_B0.1"])


def test_receive_comes_right_before_and_send_right_after() -> None:
    sched = build_schedule(ScheduleConfig("sequential", stages=2, batches=1))
    assert [str(a.with_version(None)) for a in sched.device_actions[1]] == [
        "1RECV_F0", "1F0", "1LOSS0", "1B0", "1SEND_B0", "1U0"]
    assert [str(a.with_version(None)) for a in sched.device_actions[0]] == [
        "0F0", "0SEND_F0", "0RECV_B0", "0B0", "0U0"]


def test_local_updates_send_no_gradients() -> None:
    sched = build_schedule(ScheduleConfig("local", stages=3, batches=4))
    assert not [a for a in sched.actions() if a.kind in (Kind.SEND_B, Kind.RECV_B)]
    assert len([a for a in sched.actions() if a.kind is Kind.SEND_F]) == 2 * 4


def test_lowering_is_idempotent_and_one_device_needs_none() -> None:
    sched = build_schedule(ScheduleConfig("1f1b", stages=3, microbatches=3, batches=2))
    assert lower(sched) is sched
    single = build_schedule(ScheduleConfig("1f1b", stages=3, microbatches=3, batches=2, fold=1))
    assert not [a for a in single.actions() if a.kind in P2P]
    raw = replace(single, lowered=False)
    assert lower(raw).device_actions == single.device_actions
