"""A rank that crashes or hangs brings the whole run down in bounded time, loudly.

Faults are injected with the test-only ``STALESIM_EXECUTOR_FAULT`` variable
(``RANK:ACTION:crash|hang|raise``). Every rank must exit, none may be left
behind, and the error names the rank and the action.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from stalesim.executor import make_job, run_local
from stalesim.executor.launch import ExecutorError
from stalesim.runtime.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
# process start + torch import on a busy 2-core box, plus the deadline and the grace period
STARTUP_S = 60.0


def _cfg(**over) -> TrainConfig:
    kw = dict(  # noqa: C408
        model="lenet5", dataset="synthetic", schedule="stale", stages=2, iterations=30,
              batch_size=16, synthetic_size=128)
    kw.update(over)
    return TrainConfig(**kw).check()


def _alive_with(marker: str) -> list[int]:
    """PIDs whose command line mentions ``marker`` (our ranks carry the spec path)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(d.name) != os.getpid():
            pids.append(int(d.name))
    return pids


def _run_failing(tmp_path: Path, fault: str, timeout_s: float) -> tuple[str, float]:
    t0 = time.monotonic()
    with pytest.raises(ExecutorError) as info:
        run_local(make_job(_cfg(), evaluate=False), "cpu:2", timeout_s=timeout_s,
                  env={"STALESIM_EXECUTOR_FAULT": fault}, workdir=tmp_path / "work")
    elapsed = time.monotonic() - t0
    assert _alive_with(str(tmp_path / "work")) == [], "a rank outlived the run"
    return str(info.value), elapsed


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_crashed_rank_stops_every_rank(tmp_path):
    msg, elapsed = _run_failing(tmp_path, "1:1F10:crash", timeout_s=30)
    assert "rank 1 was killed by SIGKILL during 1F10" in msg
    assert "rank 0" in msg and "lost the connection" in msg
    assert "\n" not in msg
    assert elapsed < STARTUP_S + 30


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_hung_rank_times_out_and_is_killed(tmp_path):
    msg, elapsed = _run_failing(tmp_path, "1:1F10:hang", timeout_s=3)
    # rank 0 waits for 1F10's gradient (it sent the activation), misses the deadline
    assert "rank 0: timed out after 3 s waiting on" in msg
    assert "RECV_B" in msg
    assert "rank 1 did not exit after the failure and was killed during 1F10" in msg
    assert elapsed < STARTUP_S + 3 + 5


@pytest.mark.slow
def test_cli_reports_a_failing_rank_in_one_line_with_status_2(tmp_path):
    env = dict(os.environ, STALESIM_EXECUTOR_FAULT="0:0F3:raise")
    proc = subprocess.run(
        [sys.executable, "-m", "stalesim", "run", "--model", "lenet5", "--dataset", "synthetic",
         "--schedule", "stale", "--stages", "2", "--devices", "cpu:2", "--iterations", "8",
         "--batch-size", "16", "--synthetic-size", "64", "--timeout", "10", "--out", str(tmp_path / "r")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("stalesim: error: executor failed: rank 0: InjectedFault")
    assert "0F3" in last
    assert not (tmp_path / "r" / "summary.json").exists()
