"""Relative data paths resolve against the directory a command started in, also in processes
that start elsewhere, and errors name both the text given and the folder it resolved to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.runtime import datapaths
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.datapaths import DATA_ENV, absolute, data_root, pin_data_env, shown
from stalesim.runtime.text import SHAKESPEARE_FILE, load_text

ROOT = Path(__file__).resolve().parents[2]
TEXT = b"To be, or not to be, that is the question. " * 40


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """tmp/start (where the command starts), tmp/data/shakespeare/<text>, tmp/elsewhere."""
    (tmp_path / "start").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "data" / "shakespeare").mkdir(parents=True)
    (tmp_path / "data" / "shakespeare" / SHAKESPEARE_FILE).write_bytes(TEXT)
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datapaths, "_GIVEN", {})
    monkeypatch.chdir(tmp_path / "start")
    return tmp_path


def _cfg(data_dir: str | None = None) -> TrainConfig:
    return TrainConfig(model="gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8", dataset="shakespeare",
                       data_dir=data_dir, iterations=1, batch_size=2)


def test_absolute_and_shown() -> None:
    assert absolute("/a/b/../c") == Path("/a/c")
    assert absolute("x/y") == Path(os.getcwd()) / "x" / "y"
    assert shown("/a/c") == "'/a/c'"  # nothing to add when the text is the path
    assert shown("../d", Path("/w/d")) == "'../d' (resolved to /w/d)"


def test_relative_env_resolves_against_the_start_and_stays_there(layout, monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, "../data")
    want = layout / "data"
    assert data_root(_cfg()) == want  # first read: pinned against the current directory
    assert os.environ[DATA_ENV] == str(want)
    monkeypatch.chdir(layout / "elsewhere")  # e.g. a notebook kernel in notebooks/
    assert data_root(_cfg()) == want
    assert load_text(_cfg(), 8).train_size == int(len(TEXT) * 0.9)
    assert pin_data_env() == str(want)  # pinning again changes nothing


def test_relative_env_not_a_folder_names_given_and_resolved(layout, monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, "../no-such-data")
    with pytest.raises(StalesimError) as exc:
        data_root(_cfg())
    msg = str(exc.value)
    assert msg == (f"STALESIM_DATA: '../no-such-data' (resolved to {layout / 'no-such-data'}) "
                   "is not a folder")
    monkeypatch.chdir(layout / "elsewhere")  # after pinning, still the given text and the same folder
    with pytest.raises(StalesimError, match="'../no-such-data' \\(resolved to .*/no-such-data\\)"):
        data_root(_cfg())


def test_relative_data_dir_resolves_against_the_current_directory(layout, monkeypatch) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)
    cfg = _cfg("../data")
    cfg.check_data_dir()
    assert data_root(cfg) == layout / "data"
    bad = _cfg("../nodata")
    with pytest.raises(StalesimError) as exc:
        bad.check_data_dir()
    assert str(exc.value) == f"data_dir: '../nodata' (resolved to {layout / 'nodata'}) is not a folder"


def _cli(args: list[str], cwd: Path, env_data: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), STALESIM_NO_DOWNLOAD="1")
    env.pop(DATA_ENV, None)
    if env_data is not None:
        env[DATA_ENV] = env_data
    return subprocess.run([sys.executable, "-m", "stalesim", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_relative_env_error_names_the_resolved_folder(layout) -> None:
    p = _cli(["emulate", "--model", "gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8", "--dataset",
              "shakespeare", "--iterations", "1", "--batch-size", "2", "--quiet"],
             layout / "start", "../missing")
    assert p.returncode == 2
    assert p.stderr.strip() == (f"stalesim: error: STALESIM_DATA: '../missing' (resolved to "
                                f"{layout / 'missing'}) is not a folder")


def test_cli_pins_the_env_for_its_child_processes(layout, monkeypatch) -> None:
    """Children inherit the absolute folder, wherever they start."""
    monkeypatch.setenv(DATA_ENV, "../data")
    pin_data_env()
    out = subprocess.run([sys.executable, "-c", f"import os; print(os.environ[{DATA_ENV!r}])"],
                         cwd=layout / "elsewhere", capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == str(layout / "data")
