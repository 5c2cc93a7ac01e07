"""Dependencies: the one definition of what each action waits for."""

from __future__ import annotations

from stalesim.schedule import Action, Kind, ScheduleConfig, build_schedule
from stalesim.schedule.deps import ardone, dependencies, peer


def _deps(sched, text):
    return [d if d[0] == "ARDONE" else str(Action(d[0], d[2], d[3], d[4], d[1]))
            for d in dependencies(sched, Action.parse(text))]


def test_pipeline_dependencies_after_lowering() -> None:
    s = build_schedule(ScheduleConfig("gpipe", stages=3, microbatches=2, batches=2))
    assert _deps(s, "1F1.0") == ["1RECV_F1.0"]
    assert _deps(s, "0F1.0") == []
    assert _deps(s, "2LOSS1.1") == ["2F1.1"]
    assert _deps(s, "2B1.1") == ["2F1.1", "2LOSS1.1"]
    assert _deps(s, "1B0.1") == ["1F0.1", "1RECV_B0.1"]
    assert _deps(s, "0U1") == ["0B1.0", "0B1.1"]
    assert _deps(s, "1RECV_F1.0") == ["0SEND_F1.0"]
    assert _deps(s, "1SEND_B0.1") == ["1B0.1"]


def test_same_device_stages_depend_directly() -> None:
    s = build_schedule(ScheduleConfig("sequential", stages=2, batches=1, fold=1))
    assert _deps(s, "1F0") == ["0F0"]
    assert _deps(s, "0B0") == ["0F0", "1B0"]


def test_data_parallel_updates_wait_for_the_allreduce() -> None:
    s = build_schedule(ScheduleConfig("dp", stages=2, workers=3, batches=2))
    assert _deps(s, "w2:0U1") == ["w2:0B1", "w2:0ARW1"]
    assert _deps(s, "w1:1AR0") == ["w1:1B0"]
    assert list(dependencies(s, Action.parse("w1:1ARW0"))) == [(Kind.AR, 1, 1, 0, None), ardone(1, 0)]


def test_peers_pair_sends_and_receives() -> None:
    assert peer(Action.parse("1SEND_F3.2")) == (Kind.RECV_F, 0, 2, 3, 2)
    assert peer(Action.parse("2SEND_B3")) == (Kind.RECV_B, 0, 1, 3, None)
    assert peer(Action.parse("1F3")) is None
