"""A command whose stdout is closed (``exec 1>&-``) or full (``/dev/full``) ends with one line
on stderr and status 2, never a traceback; one that prints nothing to stdout still works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = "schedule 1f1b -S 2 --batches 2"


def _shell(line: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``line`` in bash with ``python -m stalesim`` as ``$S`` (the redirections are bash's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "S": f"{sys.executable} -m stalesim"}
    return subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("args", [SCHEDULE, f"{SCHEDULE} --json", "schedule --help"])
@pytest.mark.parametrize("where", ["closed", "full"])
def test_a_closed_or_full_stdout_is_one_line_and_status_2(tmp_path: Path, args: str, where: str) -> None:
    if where == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    redirect = "1>&-" if where == "closed" else "1>/dev/full"
    got = _shell(f"exec 2>err.txt {redirect}; $S {args}; echo $? >rc.txt", tmp_path)
    assert got.returncode == 0
    err = (tmp_path / "err.txt").read_text()
    assert (tmp_path / "rc.txt").read_text().strip() == "2", err
    assert err.count("\n") == 1 and "Traceback" not in err
    reason = "Bad file descriptor" if where == "closed" else "No space left on device"
    assert err == f"stalesim: error: cannot write the output (stdout): {reason}\n"


def test_files_written_with_stdout_closed_are_their_own(tmp_path: Path) -> None:
    """With descriptors 0 and 1 closed, the CSV the command writes is a file of its own (it
    did not take descriptor 1 and receive the printed grid), complete; the grid's write to
    the closed stdout is reported in one line."""
    got = _shell(f"exec 2>err.txt 1>&- 0<&-; $S {SCHEDULE} --to-torch-csv out.csv; echo $? >rc.txt", tmp_path)
    assert got.returncode == 0
    assert (tmp_path / "rc.txt").read_text().strip() == "2"
    err = (tmp_path / "err.txt").read_text()
    assert err == "stalesim: error: cannot write the output (stdout): Bad file descriptor\n"
    _shell(f"$S {SCHEDULE} --to-torch-csv open.csv >/dev/null", tmp_path)
    assert (tmp_path / "out.csv").read_text() == (tmp_path / "open.csv").read_text() == "0F0,0B0\n1F0,1B0\n"


def test_a_closed_stderr_keeps_the_status(tmp_path: Path) -> None:
    got = _shell("$S schedule nosuch 2>&-; echo $?", tmp_path)
    assert got.stdout.strip() == "2"
    got = _shell(f"$S {SCHEDULE} 2>&- >&-; echo $? >&2", tmp_path)
    assert got.stderr.strip() == "2"


def test_hold_standard_streams_leaves_open_streams_alone() -> None:
    from stalesim.cli.common import hold_standard_streams

    before = (sys.stdin, sys.stdout, sys.stderr)
    hold_standard_streams()
    assert (sys.stdin, sys.stdout, sys.stderr) == before
