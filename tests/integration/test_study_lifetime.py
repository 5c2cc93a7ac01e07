"""A study folder has one writer, and no study worker outlives its study.

Two studies into one ``--out``: the second is refused at once (exit 2, one line
naming the holder) and the first's results are whole. A ``study --batched``
killed with SIGKILL leaves no worker behind, and ``--resume`` then finishes
every run exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]
STUDY = ["study", "--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "64", "--batch-size", "16",
         "--schedules", "stale", "--placements", "S2", "--seeds", "0,1", "--jobs", "1", "--quiet"]


def _spawn(argv: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "stalesim", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has finished; only its exit status is left


def test_second_study_into_the_same_folder_is_refused(tmp_path, capsys):
    first = _spawn([*STUDY, "--iterations", "60", "--batched", "--out", str(tmp_path)])
    try:
        lock = tmp_path / ".stalesim.lock"
        _wait_for(lambda: lock.exists() and lock.stat().st_size > 0, 60, "the first study's lock")
        for extra in ([], ["--batched"]):
            rc = main([*STUDY, "--iterations", "5", "--seeds", "7", *extra, "--out", str(tmp_path)])
            err = capsys.readouterr().err
            assert rc == 2
            assert err.startswith(f"stalesim: error: {tmp_path}: in use by another stalesim command "
                                  f"(pid {first.pid}, 'stalesim study")
            assert len(err.strip().splitlines()) == 1
        _, err1 = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err1
    runs = [json.loads(line)["run_id"] for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(runs) == ["stale_S2_none_seed0", "stale_S2_none_seed1"]  # the first study's, whole
    assert "seed7" not in (tmp_path / "table.md").read_text() and "| 2 |" in (tmp_path / "table.md").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_killed_batched_study_leaves_no_worker_and_resumes_exactly(tmp_path):
    argv = [*STUDY, "--iterations", "400", "--batched", "--checkpoint-every", "10", "--out", str(tmp_path)]
    study = _spawn(argv)
    ckpt = tmp_path / "batches" / "b00_stale_S2" / "checkpoint.pt"
    try:
        _wait_for(lambda: ckpt.exists() or study.poll() is not None, 120, "the batch's first checkpoint")
        assert study.poll() is None, "the study finished before it could be killed: make it longer"
        workers = _children(study.pid)
        assert workers
        os.kill(study.pid, signal.SIGKILL)
        study.wait(timeout=10)
        _wait_for(lambda: not any(_alive(w) for w in workers), 10, "the workers to die with the study")
    finally:
        if study.poll() is None:
            study.kill()
    assert not (tmp_path / "runs" / "stale_S2_none_seed0" / "summary.json").exists()
    resumed = _spawn([*argv, "--resume"])
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    runs = [json.loads(line)["run_id"] for line in lines]
    assert sorted(runs) == ["stale_S2_none_seed0", "stale_S2_none_seed1"]  # each exactly once
    for rid in runs:
        summary = json.loads((tmp_path / "runs" / rid / "summary.json").read_text())
        assert summary["steps_done"] == 400
    assert "| 2 |" in (tmp_path / "table.md").read_text()  # two seeds, not four
