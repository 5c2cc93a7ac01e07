"""stalesim.progress: a line every ~10 s without a terminal, nothing with enabled=False."""

from __future__ import annotations

import io
import time

from stalesim.progress import Progress, heartbeat


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_without_a_terminal_every_interval():
    out, clock = io.StringIO(), _Clock()
    p = Progress(100, "stale S=2", "batch", stream=out, clock=clock, every_s=10.0)
    clock.t = 3.0
    p.update(5)
    assert out.getvalue() == ""  # too soon
    clock.t = 10.5
    p.goto(40)
    clock.t = 12.0
    p.update(1)  # 1.5 s after the last line: none
    clock.t = 21.0
    p.goto(100)
    p.close()
    p.close()  # idempotent
    assert out.getvalue().splitlines() == [
        "stale S=2: 40/100 batch (10 s, running)",
        "stale S=2: 100/100 batch (21 s, running)",
        "stale S=2: 100/100 batch (21 s, done)",
    ]


def test_short_or_disabled_steps_stay_silent():
    out, clock = io.StringIO(), _Clock()
    with Progress(10, "quick", stream=out, clock=clock) as p:
        clock.t = 2.0
        p.update(10)
    off = Progress(10, "quiet", stream=out, clock=clock, enabled=False)
    clock.t = 100.0
    off.update(10)
    off.close()
    assert out.getvalue() == ""


def test_heartbeat_prints_while_a_step_runs():
    out = io.StringIO()
    with heartbeat("step 2: profiling", every_s=0.05, stream=out):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2
    assert all(line.startswith("step 2: profiling: still running (") for line in lines)
    quiet = io.StringIO()
    with heartbeat("x", every_s=0.01, stream=quiet, enabled=False):
        time.sleep(0.05)
    assert quiet.getvalue() == ""
