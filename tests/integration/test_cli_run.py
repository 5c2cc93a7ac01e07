"""``stalesim run``: the acceptance command end to end, and bad input -> one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stalesim", "run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("devices, needle", [
    ("cpu:3", "needs 2"),
    ("gpu:2", "expected cpu:N or cuda"),
    ("cpu:zero", "cpu:N"),
])
def test_bad_devices_is_one_line_exit_2(devices, needle):
    p = _run("--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
             "--devices", devices, "--iterations", "5")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stalesim: error: --devices") and needle in lines[0]


def test_bad_training_flag_is_one_line_exit_2():
    p = _run("--model", "lenet5", "--schedule", "stale", "--stages", "2", "--workers", "2",
             "--devices", "cpu:2", "--iterations", "5")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "workers" in p.stderr


@pytest.mark.slow
def test_acceptance_command(tmp_path):
    out = tmp_path / "run"
    p = _run("--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
             "--devices", "cpu:2", "--iterations", "50", "--json", "--out", str(out))
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert len(s["losses"]) == 50 and all(isinstance(x, float) for x in s["losses"])
    assert s["staleness_measured"] == [2, 0] and s["versions_match_ir"]
    assert s["iteration_time_s"] > 0 and s["throughput_samples_per_s"] > 0
    assert set(s["utilization"]) == set(s["peak_memory_bytes"]) == {"0", "1"}
    for name in ("config.json", "metrics.jsonl", "trace.json", "versions.json", "summary.json"):
        assert (out / name).is_file(), name
    trace = json.loads((out / "trace.json").read_text())
    from stalesim.trace import check_chrome_trace

    assert check_chrome_trace(trace) == []
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"0F0", "1F0", "1LOSS0", "1B0", "0SEND_F0", "1RECV_F0", "0RECV_B0"} <= names
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 50


@pytest.mark.slow
def test_epochs_and_fold_on_real_ranks(tmp_path):
    """Counting by epochs (rank 0 reads the data set and broadcasts its length) and three
    stages folded onto two ranks (--fold)."""
    p = _run("--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "192", "--batch-size", "24",
             "--epochs", "1", "--schedule", "stale", "--stages", "3", "--fold", "2", "--devices", "cpu:2",
             "--out", str(tmp_path / "r"), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["iterations"] == 8 and s["devices"] == 2 and s["stages"] == 3
    assert s["staleness_measured"] == s["staleness_ir"] == [4, 2, 0] and s["versions_match_ir"]


def test_python_m_executor_flags_point_to_the_new_torchrun_entry():
    p = subprocess.run([sys.executable, "-m", "stalesim.executor", "--model", "lenet5"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "-m stalesim run" in p.stderr


@pytest.fixture
def no_launch(monkeypatch):
    import stalesim.executor.launch

    def boom(*a, **k):
        raise AssertionError("ranks were launched for input that should have been refused up front")

    monkeypatch.setattr(stalesim.executor.launch, "run_local", boom)


@pytest.mark.parametrize("extra, needle", [
    (["--master-addr", ""], "--master-addr: empty host name"),
    (["--resume"], "--resume: no checkpoint in"),
    (["--data-dir", "/no/such/folder"], "data_dir: '/no/such/folder' is not a folder"),
    (["--model", "nosuch"], "model: unknown model 'nosuch'"),
    (["--stages", "1000000"], "stages: 1000000 stages requested"),
    (["--timeout", "1e300"], "argument --timeout"),
    (["--threads", "100000"], "argument --threads"),
])
def test_bad_input_refused_before_any_rank_starts(tmp_path, capsys, no_launch, extra, needle):
    """Bad-input probe: `run --master-addr` with a bad host raised socket.gaierror; it and the
    other run-level checks now come before the run folder is made and any rank starts."""
    from stalesim.cli import main

    out = tmp_path / "run"
    argv = ["run", "--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "64", "--batch-size", "8",
            "--iterations", "2", "--devices", "cpu:1", "--out", str(out), *extra]
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("stalesim: error: ") and needle in err and err.count("\n") == 1, err
    if "--resume" not in extra:
        assert not out.exists()
