"""The executor as a part of the stalesim package: what ``pip install .`` installs, where the
ranks import stalesim from, and the run facts the CLI and the Python API share from below
the CLI (a run's device count, the default thread count)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from setuptools import find_packages

import stalesim
import stalesim.executor.launch as launch
from stalesim.executor.spec import expected_devices, job_schedule
from stalesim.threads import DEFAULT_THREADS

ROOT = Path(__file__).resolve().parents[2]


def test_the_install_holds_one_top_level_package() -> None:
    """A user's site-packages gains ``stalesim`` and nothing else: no global name such as
    ``executor`` that another project may also claim."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        include = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(str(ROOT), include=include)
    assert "stalesim.executor" in packages
    assert {p.split(".")[0] for p in packages} == {"stalesim"}


def test_ranks_import_stalesim_from_the_folder_that_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks' PYTHONPATH starts with the folder holding the ``stalesim`` package (never the
    package folder: its modules would shadow top-level names), and they run the package's
    ``-m stalesim.executor``."""
    seen: dict[str, object] = {}

    class Stop(Exception):
        pass

    def fake_popen(argv: list[str], env: dict[str, str], **_: object) -> None:
        seen["argv"], seen["path"] = argv, env["PYTHONPATH"]
        raise Stop

    monkeypatch.setattr(launch.subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        launch.run_local({"train": {}}, "cpu:1", timeout_s=5)
    first = Path(str(seen["path"]).split(os.pathsep)[0])
    assert first == Path(stalesim.__file__).resolve().parents[1]
    assert (first / "stalesim" / "executor" / "__main__.py").is_file()
    assert list(seen["argv"])[1:3] == ["-m", "stalesim.executor"]  # type: ignore[call-overload]


def test_python_m_stalesim_executor_is_the_entry_point() -> None:
    p = subprocess.run([sys.executable, "-m", "stalesim.executor", "--spec"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "python -m stalesim.executor only takes --spec FILE" in p.stderr


@pytest.mark.parametrize("fields, devices", [
    ({"schedule": "1f1b", "stages": 3, "iterations": 4}, 3),
    ({"schedule": "interleaved-1f1b", "stages": 4, "fold": 2, "iterations": 4}, 2),
    ({"schedule": "1f1b", "stages": 3, "iterations": None, "epochs": 1}, 3),  # no schedule before the data
])
def test_expected_devices(fields: dict[str, object], devices: int) -> None:
    cfg = stalesim.config(dataset="synthetic", **fields)
    sched = job_schedule(cfg)
    assert (sched is None) == (fields["iterations"] is None)
    assert expected_devices(cfg, sched) == expected_devices(cfg) == devices


def test_every_entry_point_defaults_to_the_one_thread_count() -> None:
    from stalesim.cli import build_parser

    assert DEFAULT_THREADS == 1
    assert inspect.signature(stalesim.run).parameters["threads"].default == DEFAULT_THREADS
    assert inspect.signature(stalesim.emulate).parameters["threads"].default == DEFAULT_THREADS
    assert inspect.signature(launch.run_local).parameters["threads"].default == DEFAULT_THREADS
    args = build_parser().parse_args(["run", "--model", "lenet5", "--devices", "cpu:2"])
    assert args.threads == DEFAULT_THREADS
