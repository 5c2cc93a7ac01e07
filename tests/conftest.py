"""Shared fixtures.

``real_data_dir`` gives the directory with the real datasets (``$STALESIM_DATA``).
Without it the test is skipped, unless ``STALESIM_REQUIRE_DATA=1`` (CI), where a
missing data set is a failure: CI must never pass by skipping the real-data tests.

Under pytest-xdist (``make test``: 2 workers) the tests named in ``_parallel.ALONE`` run with
nothing beside them; the controller makes the lock folder, each worker takes its turn per test.
Each worker computes on one thread (``OMP_NUM_THREADS=1``, inherited by the processes its tests
start) unless the environment already says otherwise: two workers then fill the two cores
instead of each oversubscribing them with an intra-op pool sized for the whole machine.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _parallel import LOCK_ENV, is_alone, turn


def _require_data() -> bool:
    return os.environ.get("STALESIM_REQUIRE_DATA", "") not in ("", "0")


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    root = os.environ.get("STALESIM_DATA")
    if not root or not Path(root).is_dir():
        msg = f"real datasets not found (STALESIM_DATA={root!r})"
        if _require_data():
            pytest.fail(msg + " but STALESIM_REQUIRE_DATA=1")
        pytest.skip(msg)
    return Path(root)


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


#: the lock folder this process made (the controller of an xdist run), removed when it ends
_OWN_LOCK_DIR = pytest.StashKey[str]()


def _one_thread_per_worker() -> None:
    """Before the worker imports torch (its thread pool reads the variable once); if a plugin
    imported it already, the pool is set directly."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_configure(config: pytest.Config) -> None:  # noqa: D103
    if _is_worker(config):
        _one_thread_per_worker()
    config.addinivalue_line("markers", "alone: runs with no other test beside it under xdist (tests/_parallel.py)")
    # the controller of an xdist run (-n N, N > 0) makes the lock folder before it starts the workers,
    # which inherit its path; a plain run has no workers and locks nothing
    workers = getattr(config.option, "numprocesses", None)  # xdist has made "auto" a number by now
    if not _is_worker(config) and isinstance(workers, int) and workers > 0:
        folder = tempfile.mkdtemp(prefix="stalesim-pytest-")
        os.environ[LOCK_ENV] = config.stash[_OWN_LOCK_DIR] = folder


def pytest_unconfigure(config: pytest.Config) -> None:  # noqa: D103
    # only the folder this process made: a pytest that a test starts (gpucheck's collecting step)
    # inherits the variable, and must leave the run's folder to the run
    folder = config.stash.get(_OWN_LOCK_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(LOCK_ENV) == folder:
            del os.environ[LOCK_ENV]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:  # noqa: D103
    folder = os.environ.get(LOCK_ENV)
    if not _is_worker(item.config) or not folder:
        yield
        return
    with turn(Path(folder), alone=item.get_closest_marker("alone") is not None):
        yield


def pytest_itemcollected(item: pytest.Item) -> None:  # noqa: D103
    if is_alone(item.nodeid):
        item.add_marker(pytest.mark.alone)


def pytest_collection_modifyitems(config, items):  # noqa: D103
    if has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="no CUDA device visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
