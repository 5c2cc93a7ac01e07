"""No co-runner outlives the process that started it.

A co-runner (:class:`stalesim.validate.corunners.CoRunners`) trains until told to stop, to
keep the other core busy while a profile or a stage is timed. If the validation or demo that
started it is killed (SIGKILL, or SIGTERM, neither of which runs exit handlers), nothing tells
it to stop: before it asked the kernel to kill it with its parent, one such co-runner was found
still training an hour after its ``stalesim validate`` had been killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a parent that starts one running co-runner, prints its pid, then waits to be killed
PARENT = """
import sys, time
from stalesim.validate.corunners import CoRunners
with CoRunners("lenet5", 8, 1, timeout_s=60) as co:
    print(" ".join(str(p.pid) for p in co._procs), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_co_runner_dies_with_its_killed_parent(sig: signal.Signals) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        kids = [int(p) for p in line.split()]
        assert kids and all(_alive(k) for k in kids), f"no co-runner started: {line!r} {parent.stderr}"
        parent.send_signal(sig)
        parent.wait(timeout=30)
        end = time.monotonic() + 20
        while any(_alive(k) for k in kids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(k) for k in kids), f"co-runner(s) {kids} outlived their parent ({sig.name})"
    finally:
        if parent.poll() is None:
            parent.kill()
        for k in locals().get("kids", []):
            if _alive(k):
                os.kill(k, signal.SIGKILL)
