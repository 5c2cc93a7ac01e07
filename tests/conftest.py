"""Shared fixtures.

``real_data_dir`` gives the directory with the real datasets (``$STALESIM_DATA``).
Without it the test is skipped, unless ``STALESIM_REQUIRE_DATA=1`` (CI), where a
missing data set is a failure: CI must never pass by skipping the real-data tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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


def pytest_collection_modifyitems(config, items):  # noqa: D103
    if has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="no CUDA device visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
