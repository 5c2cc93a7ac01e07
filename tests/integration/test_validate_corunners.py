"""Co-runner processes: paused co-runners really stop computing, resumed ones compute."""

from __future__ import annotations

import os
import time

import pytest

from stalesim.errors import StalesimError
from stalesim.validate.corunners import CoRunners


def _cpu_ticks(pid: int) -> int:
    """User + system CPU time of ``pid`` in clock ticks (/proc/<pid>/stat, fields 14-15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _used(pid: int, seconds: float) -> float:
    """Seconds of CPU ``pid`` used over ``seconds`` of wall time."""
    t0 = _cpu_ticks(pid)
    time.sleep(seconds)
    return (_cpu_ticks(pid) - t0) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_pause_waits_until_the_co_runners_stop_and_resume_restarts_them() -> None:
    with CoRunners("lenet5", 16, 1, running=False) as co:
        (p,) = co._procs
        assert _used(p.pid, 0.6) < 0.06  # created paused: idle after its first step
        co.resume()
        time.sleep(0.2)
        assert _used(p.pid, 1.0) > 0.25  # computing (a core's worth on an idle machine)
        co.pause()
        assert _used(p.pid, 0.6) < 0.06  # pause returned: no step runs any more
    assert not p.is_alive()


def test_co_runner_count_is_checked() -> None:
    with pytest.raises(StalesimError, match="co_runners"):
        CoRunners("lenet5", 4, 0)


def test_a_co_runner_that_fails_reports_why_in_one_line(capfd):
    """A co-runner whose model cannot be built (here an unknown name; in practice a user's model
    that fails at the co-runner's batch size) is one line naming the reason, no child traceback."""
    with pytest.raises(StalesimError, match="^contention: a co-runner failed: unknown model 'nosuch'"), \
            CoRunners("nosuch", 8, 1, timeout_s=60):
        pass
    assert "Traceback" not in capfd.readouterr().err
