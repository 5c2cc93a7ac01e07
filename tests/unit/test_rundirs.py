"""Default run folders: created exclusively, so two commands never share one."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.rundirs import fresh_run_dir, run_dir_name


def test_two_runs_in_the_same_second_get_their_own_folders(tmp_path: Path) -> None:
    name = run_dir_name("lenet5", "1f1b", when=0.0)
    first = fresh_run_dir(tmp_path / "runs", name)
    second = fresh_run_dir(tmp_path / "runs", name)
    assert Path(first).name == name and Path(second).name == f"{name}-2"
    assert Path(first).is_dir() and Path(second).is_dir()


def test_many_at_once_never_collide(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _i: fresh_run_dir(tmp_path, "run-x"), range(40)))
    assert len(set(got)) == 40 and sorted(os.listdir(tmp_path)) == sorted(Path(p).name for p in got)


def test_names_are_folder_names() -> None:
    name = run_dir_name("my.pkg:factory", "file:a b.json", when=0.0)
    assert name.startswith("run-my.pkg_factory-file_a_b.json-") and "/" not in name


def test_a_file_in_the_way_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("x")
    with pytest.raises(StalesimError, match="exists and is not a folder"):
        fresh_run_dir(tmp_path / "runs", "run-x")
