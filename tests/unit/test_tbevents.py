"""stalesim.tbevents: a new writer's event file sorts after every file already in its folder,
so TensorBoard reads its purge and its points last."""

from __future__ import annotations

import time

import pytest

import stalesim.tbevents as tbevents
from stalesim.tbevents import newest_second, open_writer, wait_past

pytest.importorskip("tensorboard")
import torch.utils.tensorboard  # noqa: E402,F401  (imported now: the writer then opens within milliseconds)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _scalars(folder, tag):
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


class FakeClock:
    """time.time and time.sleep of a clock that only moves when slept on."""

    def __init__(self, now: float) -> None:
        self.now, self.slept = now, []

    def time(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_newest_second_reads_the_time_field_of_event_files_only(tmp_path):
    for name in ("events.out.tfevents.0000000123.host.9.10", "events.out.tfevents.0000000124.host.1.2",
                 "events.out.tfevents.0000000099.host.77.9.v2", "notes.txt", "events.out.tfevents.x"):
        (tmp_path / name).write_bytes(b"")
    assert newest_second(tmp_path) == 124
    assert newest_second(tmp_path / "absent") is None
    (tmp_path / "empty").mkdir()
    assert newest_second(tmp_path / "empty") is None


def test_wait_past_sleeps_into_the_next_second_only_when_needed(monkeypatch):
    clock = FakeClock(1000.25)
    monkeypatch.setattr(tbevents, "time", clock)
    wait_past(1000)  # a file of this second: on to 1001
    assert clock.now >= 1001 and int(clock.now) == 1001 and sum(clock.slept) == pytest.approx(0.75)
    clock.slept.clear()
    wait_past(999)  # an older second: no wait
    wait_past(None)  # no file
    assert clock.slept == []
    wait_past(1001 + 5)  # a clock well ahead of ours: not waited for (the known gap)
    assert clock.slept == []


def test_a_writer_opened_in_the_second_of_a_file_there_sorts_after_it(tmp_path):
    """A file of this second whose pid and counter sort last as text: the new file still
    sorts after it (it waited for the next second), within about a second."""
    time.sleep(1.0 - time.time() % 1.0)  # at a second's start: the writer opens in this second unless it waits
    now = int(time.time())
    old = tmp_path / f"events.out.tfevents.{now:010d}.zzzz.99999.99"
    old.write_bytes(b"")
    t0 = time.monotonic()
    w = open_writer(tmp_path)
    w.close()
    assert time.monotonic() - t0 < 1.5
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and names[0] == old.name
    assert int(names[1].split(".")[3]) > now


def test_a_new_writer_purging_from_0_replaces_a_same_second_curve(tmp_path):
    """Two writers one after the other in one second, each purging from step 0: the reader
    shows exactly the second one's points (the first's step 2 too is hidden)."""
    first = open_writer(tmp_path, purge_step=0)
    for k in range(3):
        first.add_scalar("t", 1.0 + k, k)
    first.close()
    second = open_writer(tmp_path, purge_step=0)
    for k in range(2):
        second.add_scalar("t", 10.0 + k, k)
    second.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert _scalars(tmp_path, "t") == [(0, 10.0), (1, 11.0)]
