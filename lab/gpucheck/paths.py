"""Where this tree is, and the environment that makes child processes import it."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def tree_env() -> dict[str, str]:
    """This environment with this tree first on PYTHONPATH, so a child (a step's process, pytest,
    the executor's ranks) imports the same stalesim wherever it was started from: a lent GPU
    machine has no installed copy."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env
