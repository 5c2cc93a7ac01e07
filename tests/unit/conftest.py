"""The unit tier's rule, enforced: no test here starts a process, and none runs long.

A unit test checks one module's logic in this process (no rank launched, no subprocess, no
training beyond a few steps), so the whole tier runs in a few minutes and a failure names
the module. A test that needs a process belongs in ``tests/integration/``; one that runs a
README command, a notebook or the demo in ``tests/e2e/``.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator

import pytest

#: seconds a unit test may take (pytest-timeout); the other tiers keep pyproject's limit
UNIT_TIMEOUT_S = 120


class _ProcessStarted(AssertionError):
    pass


def _refuse(what: str) -> None:
    raise _ProcessStarted(f"a unit test started {what}; move it to tests/integration/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:  # noqa: D103
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _no_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Starting a subprocess or a multiprocessing child fails the test (fork is left alone:
    torch and the data loaders fork nothing in this tier's tests, and a fork hook cannot
    raise)."""
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, *a, **k: _refuse(f"a subprocess {a[:1]}"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", lambda self: _refuse("a multiprocessing child"))
    yield
