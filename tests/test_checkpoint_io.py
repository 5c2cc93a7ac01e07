"""Resume never executes a pickle: a planted checkpoint whose ``__reduce__`` would create a
file is refused in one line by ``emulate --resume`` and ``run --resume``, and the file is not
created. Foreign, torn and empty checkpoints are one-line errors too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stalesim.cli import main

ROOT = Path(__file__).resolve().parent.parent
EMU = ["emulate", "--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
       "--iterations", "6", "--batch-size", "8", "--synthetic-size", "32", "--quiet"]


class Planted:
    """Unpickling this calls ``open(marker, "w")``: it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": 1, "config": {}, "payload": Planted(marker)}, path)


def _one_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: "), (rc, err)
    return err[0]


def test_planted_pickle_does_not_run_on_emulate_resume(capsys, tmp_path):
    marker = tmp_path / "PWNED"
    _plant(tmp_path / "run" / "checkpoint.pt", marker)
    line = _one_line(capsys, EMU + ["--out", str(tmp_path / "run"), "--resume"])
    assert "not a stalesim checkpoint" in line and "checkpoint.pt" in line
    assert not marker.exists()


@pytest.mark.parametrize("content", ["empty", "torn", "tensor", "foreign"])
def test_foreign_checkpoints_are_one_line(capsys, tmp_path, content):
    ck = tmp_path / "run" / "checkpoint.pt"
    ck.parent.mkdir()
    if content == "empty":
        ck.write_bytes(b"")
    elif content == "torn":
        torch.save({"format": 1, "w": torch.zeros(1000)}, ck)
        ck.write_bytes(ck.read_bytes()[:300])
    elif content == "tensor":
        torch.save(torch.zeros(3), ck)
    else:
        torch.save({"format": 1, "config": {}, "weights": [torch.zeros(2)]}, ck)
    line = _one_line(capsys, EMU + ["--out", str(tmp_path / "run"), "--resume"])
    assert str(ck) in line


def test_real_checkpoints_hold_only_plain_data(tmp_path):
    assert main(EMU + ["--out", str(tmp_path), "--checkpoint-every", "2"]) == 0
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # would raise otherwise
    assert state["format"] == 1 and isinstance(state["runtimes"], list)


@pytest.mark.slow
def test_planted_pickle_does_not_run_on_run_resume(tmp_path):
    marker = tmp_path / "PWNED"
    out = tmp_path / "run"
    for r in range(2):
        _plant(out / "checkpoints" / "k0000005" / f"rank{r}.pt", marker)
    cmd = [sys.executable, "-m", "stalesim", "run", "--model", "lenet5", "--dataset", "synthetic",
           "--schedule", "stale", "--stages", "2", "--devices", "cpu:2", "--iterations", "12",
           "--batch-size", "8", "--synthetic-size", "32", "--checkpoint-every", "5", "--resume",
           "--out", str(out), "--timeout", "20"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("stalesim:")]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and "not a stalesim checkpoint" in lines[0] and "Traceback" not in p.stderr
    assert not marker.exists()
