"""Write faults outside the atomic writer's own calls end in one line, exit 2.

torch's zip writer turns a failed write (here ``RLIMIT_FSIZE``: EFBIG) into a
``RuntimeError``; stdout can be a full device; an output folder can hold a file
where the command will make a sub-folder. Each is one ``stalesim: error:`` line,
and the last is found before any work starts.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stalesim.atomic import check_writable_dir, torch_save_atomic
from stalesim.cli import main
from stalesim.errors import StalesimError

ROOT = Path(__file__).resolve().parents[2]


def _stalesim(argv: list[str], *, fsize: int | None = None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "stalesim", *argv], cwd=ROOT, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300, preexec_fn=limit)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stalesim: error: ") and "Traceback" not in err, err
    return lines[0]


def test_torch_save_past_the_file_size_limit_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    code = ("import resource, sys, torch\n"
            "from stalesim.atomic import torch_save_atomic\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (100000, 100000))\n"
            f"torch_save_atomic({{'w': torch.zeros(100000)}}, {str(tmp_path / 'ck.pt')!r})\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "StalesimError" in p.stderr and "ck.pt: File too large" in p.stderr
    assert "unexpected pos" not in p.stderr
    assert os.listdir(tmp_path) == []  # no torn checkpoint, no temporary
    torch_save_atomic({"w": torch.zeros(3)}, tmp_path / "ok.pt")  # without the limit it works
    assert torch.load(tmp_path / "ok.pt", weights_only=True)["w"].shape == (3,)


def test_emulate_checkpoint_past_the_file_size_limit_is_one_line(tmp_path):
    out = tmp_path / "run"
    p = _stalesim(["emulate", "--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale",
                   "--stages", "2", "--iterations", "4", "--batch-size", "8", "--synthetic-size", "32",
                   "--checkpoint-every", "2", "--quiet", "--out", str(out)], fsize=128 << 10)
    assert p.returncode == 2
    line = _one_line(p.stderr)
    assert line == f"stalesim: error: {out / 'checkpoint.pt'}: File too large"
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_stdout_on_a_full_device_is_one_line():
    with open("/dev/full", "w") as full:
        p = _stalesim(["schedule", "stale", "-S", "2", "-N", "3"], stdout=full)
    assert p.returncode == 2
    assert _one_line(p.stderr) == "stalesim: error: cannot write the output (stdout): No space left on device"


def test_help_on_a_full_device_is_one_line():
    """argparse itself ignores a failed write of the help text (exit 0, nothing shown)."""
    for argv in (["--help"], ["schedule", "--help"]):
        with open("/dev/full", "w") as full:
            p = _stalesim(argv, stdout=full)
        assert p.returncode == 2
        assert _one_line(p.stderr) == "stalesim: error: cannot write the output (stdout): No space left on device"


def test_closed_pipe_on_stdout_is_quiet():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "stalesim", "schedule", "stale", "-S", "2", "-N", "3000"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.readline()
    p.stdout.close()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 141 and err == b""


def test_a_sub_folder_that_is_a_file_is_found_before_any_work(tmp_path):
    (tmp_path / "traces").write_text("not a folder")
    with pytest.raises(StalesimError, match="traces: exists and is not a folder"):
        check_writable_dir(tmp_path, subdirs=("figures", "traces"))
    check_writable_dir(tmp_path / "fresh", subdirs=("traces",))  # absent sub-folders are fine


def test_validate_with_a_file_where_a_sub_folder_goes_is_one_line_at_once(capsys, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "traces").write_text("not a folder")
    t0 = time.perf_counter()
    rc = main(["validate", "--model", "lenet5", "--devices", "cpu:2", "--schedules", "stale",
               "--iterations", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and _one_line(err).endswith("traces: exists and is not a folder (this command writes a "
                                               "folder there)")
    assert time.perf_counter() - t0 < 10
    assert sorted(os.listdir(out)) == ["traces"]  # nothing measured, nothing written
