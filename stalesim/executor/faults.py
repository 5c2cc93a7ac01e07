"""Failure handling: fault injection (tests), progress beacons, parent-death kill.

- ``STALESIM_EXECUTOR_FAULT="RANK:ACTION:MODE"`` (test only) makes rank RANK
  misbehave just before it runs ACTION (its text without version, e.g. ``1F3``):
  ``crash`` (SIGKILL itself), ``exit`` (exit status 3), ``hang`` (sleep forever),
  ``raise`` (a Python exception). Several faults may be separated by ``;``.
- A *beacon* is a small memory-mapped file per rank holding the text of the
  action it is running (or waiting on). Writing it costs a memcpy, and when a
  rank dies without a word (SIGKILL, OOM killer) the launcher can still name
  the action it was in.
- Children started by the local launcher ask the kernel to SIGKILL them when
  the launcher dies (``PR_SET_PDEATHSIG``, :mod:`stalesim.lifetime`, shared with
  the workers of a study), so no rank outlives its launcher.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import time
from pathlib import Path

from stalesim.lifetime import die_with_parent  # noqa: F401  (re-exported: ranks call it)

FAULT_ENV = "STALESIM_EXECUTOR_FAULT"
BEACON_SIZE = 96


class InjectedFault(RuntimeError):
    """Raised by the ``raise`` fault mode."""


def parse_faults(text: str | None) -> dict[tuple[int, str], str]:
    out: dict[tuple[int, str], str] = {}
    if not text:
        return out
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        rank, _, rest = part.partition(":")
        action, _, mode = rest.rpartition(":")
        if not rank.isdigit() or not action or mode not in ("crash", "exit", "hang", "raise"):
            raise ValueError(f"{FAULT_ENV}: expected RANK:ACTION:crash|exit|hang|raise, got {part!r}")
        out[(int(rank), action)] = mode
    return out


class FaultInjector:
    """Checks, before each action, whether the test asked this rank to fail there."""

    def __init__(self, rank: int, text: str | None = None) -> None:
        faults = parse_faults(text if text is not None else os.environ.get(FAULT_ENV))
        self.here = {label: mode for (r, label), mode in faults.items() if r == rank}

    def __bool__(self) -> bool:
        return bool(self.here)

    def check(self, label: str) -> None:
        mode = self.here.get(label)
        if mode is None:
            return
        sys.stderr.flush()
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "exit":
            os._exit(3)
        elif mode == "hang":
            while True:
                time.sleep(3600)
        raise InjectedFault(f"injected fault at {label}")


class Beacon:
    """Fixed-size mmap'd file holding what the rank is doing now."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self._mm = None
        self.text = ""
        if path is None:
            return
        from stalesim.atomic import write_bytes_atomic

        p = write_bytes_atomic(path, b"\0" * BEACON_SIZE)
        fd = os.open(p, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)  # the file we just made
        self._fh = os.fdopen(fd, "r+b")  # lives as long as the map
        self._mm = mmap.mmap(self._fh.fileno(), BEACON_SIZE)

    def set(self, text: str) -> None:
        self.text = text
        if self._mm is not None:
            data = text.encode()[: BEACON_SIZE - 1]
            self._mm[: len(data) + 1] = data + b"\0"


def read_beacon(path: str | os.PathLike[str]) -> str | None:
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    text = raw.split(b"\0", 1)[0].decode(errors="replace")
    return text or None
