"""tests/_parallel.py: which tests run alone under xdist, and the lock that makes them.

``flock`` locks belong to an open file, so two opens in this process contend as two workers
would; the tries here never block (``LOCK_NB``)."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest
from _parallel import ALONE, is_alone, turn


def _free(path: Path, how: int) -> bool:
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, how | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def test_a_prefix_names_a_test_its_cases_and_a_files_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("_parallel.ALONE", {"tests/a.py::test_x": "why", "tests/b.py": "why"})
    assert is_alone("tests/a.py::test_x") and is_alone("tests/a.py::test_x[1-2]")
    assert not is_alone("tests/a.py::test_xy") and not is_alone("tests/a.py::test_w")
    assert is_alone("tests/b.py::test_any") and not is_alone("tests/bb.py::test_any")


def test_every_alone_entry_names_an_existing_file_and_says_why() -> None:
    root = Path(__file__).resolve().parents[2]
    for prefix, why in ALONE.items():
        assert (root / prefix.split("::")[0]).is_file(), prefix
        assert len(why) > 20, prefix


def test_a_shared_turn_lets_others_share_and_keeps_an_alone_one_out(tmp_path: Path) -> None:
    with turn(tmp_path, alone=False):
        assert _free(tmp_path / "run", fcntl.LOCK_SH)
        assert not _free(tmp_path / "run", fcntl.LOCK_EX)
    assert _free(tmp_path / "run", fcntl.LOCK_EX)


def test_an_alone_turn_keeps_everyone_out_and_leaves_the_gate_open(tmp_path: Path) -> None:
    with turn(tmp_path, alone=True):
        assert not _free(tmp_path / "run", fcntl.LOCK_SH)
        assert _free(tmp_path / "gate", fcntl.LOCK_SH)  # released once the run lock is held
    assert _free(tmp_path / "run", fcntl.LOCK_EX) and _free(tmp_path / "gate", fcntl.LOCK_EX)


def test_a_waiting_alone_test_holds_the_gate_against_new_shared_turns(tmp_path: Path) -> None:
    """What the gate is for: while an alone test waits, the next shared turn waits behind it."""
    entered = threading.Event()

    def shared_turn() -> None:
        with turn(tmp_path, alone=False):
            entered.set()

    with open(tmp_path / "gate", "a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)  # as an alone test does while it waits for the run lock
        t = threading.Thread(target=shared_turn, daemon=True)
        t.start()
        assert not entered.wait(0.3)
        fcntl.flock(gate, fcntl.LOCK_UN)
        assert entered.wait(10)
    t.join(10)
