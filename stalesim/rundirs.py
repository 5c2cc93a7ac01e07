"""A default run folder that is this command's alone (``stalesim run`` without ``--out``).

A name from the clock alone (``runs/run-lenet5-1f1b-20260101-120000``) is the same for two
commands started in the same second, and the second then found the first's folder locked
and was refused. :func:`fresh_run_dir` creates the folder itself with an exclusive
``mkdir`` (atomic on every local and network file system), adding ``-2``, ``-3``, ... to the
name while another command holds it, so two commands never share a default folder, however
close together they start, and a folder of an earlier run is never reused.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from stalesim.atomic import ensure_dir, os_reason
from stalesim.errors import StalesimError

__all__ = ["MAX_SUFFIX", "fresh_run_dir", "run_dir_name"]

# names tried for one second's folder before giving up (thousands of runs in one second is a loop)
MAX_SUFFIX = 1000


def run_dir_name(*parts: str, when: float | None = None) -> str:
    """``run-<parts>-<local time>``, with what is no folder name in a part (a user's model
    ``pkg.module:factory``, a schedule file ``file:x.json``) replaced by ``_``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(("run", *parts))) + f"-{stamp}"


def fresh_run_dir(parent: str | os.PathLike[str], name: str) -> str:
    """Create and return ``parent/name``, or ``parent/name-2``, ``-3``, ... (the first that
    did not exist); StalesimError in one line when ``parent`` cannot hold it."""
    base = ensure_dir(parent)
    for k in range(1, MAX_SUFFIX + 1):
        path = Path(base) / (name if k == 1 else f"{name}-{k}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise StalesimError(f"{path}: cannot create folder: {os_reason(exc)}") from None
        return os.fspath(path)
    raise StalesimError(f"{Path(base) / name}: {MAX_SUFFIX} folders of this name exist already (give --out)")
