"""Children from :func:`stalesim.lifetime.fresh_context` stand where a spawned child would:
the parent's environment and folder as of when they start (not the fork server's, from when
it started), torch already imported where the platform has a fork server, and a child that
outlives the process that asked for it is killed (the co-runner and study lifetime tests kill
real parents; here the watch itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from stalesim.lifetime import Parent, adopt, fresh_context

ROOT = Path(__file__).resolve().parents[2]


def _seen() -> tuple[str | None, str, bool]:
    return os.environ.get("STALESIM_LIFETIME_PROBE"), os.getcwd(), "torch" in sys.modules


def _pool_seen() -> tuple[str | None, str, bool]:
    with ProcessPoolExecutor(1, mp_context=fresh_context(), initializer=adopt, initargs=(Parent.here(),)) as pool:
        return pool.submit(_seen).result()


def test_a_child_sees_the_environment_and_folder_of_its_start(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("STALESIM_LIFETIME_PROBE", "first")
    assert _pool_seen()[0] == "first"  # the fork server (if any) starts here, with this value
    monkeypatch.setenv("STALESIM_LIFETIME_PROBE", "second")
    monkeypatch.chdir(tmp_path)
    value, cwd, torch_loaded = _pool_seen()
    assert value == "second" and Path(cwd) == tmp_path
    if fresh_context().get_start_method() == "forkserver":
        assert torch_loaded  # imported once by the server, not again by each child
    monkeypatch.delenv("STALESIM_LIFETIME_PROBE")
    assert _pool_seen()[0] is None


# a parent that starts one pool worker of the fresh context, prints its pid, then waits to be killed
PARENT = """
import os, time
from concurrent.futures import ProcessPoolExecutor
from stalesim.lifetime import Parent, adopt, fresh_context
with ProcessPoolExecutor(1, mp_context=fresh_context(), initializer=adopt, initargs=(Parent.here(),)) as pool:
    print(pool.submit(os.getpid).result(), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and the pidfd are Linux's")
def test_a_pool_worker_dies_with_the_killed_process_that_asked_for_it() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        worker = int(line)
        assert _alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        end = time.monotonic() + 20
        while _alive(worker) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(worker), f"pool worker {worker} outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
