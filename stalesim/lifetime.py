"""No process outlives the one that started it.

A rank of ``stalesim run`` and a worker of ``stalesim study`` do minutes of work
and write into run folders. If their parent is killed with ``SIGKILL`` (which
cannot be caught, so the parent cannot clean up), an orphaned child would go on
training and writing into folders that a ``--resume`` started next is already
using. So every child asks the kernel to ``SIGKILL`` it when its parent dies
(Linux ``prctl(PR_SET_PDEATHSIG)``), and exits at once if the parent is already
gone (the parent may die between the fork and the ``prctl``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent exits.

    ``parent_pid`` is the pid the parent had when it started us (it passes
    ``os.getpid()``); if our parent is no longer that process, it died before the
    ``prctl`` took effect and we exit now. Without it, a parent of 1 (init) means
    the same. Elsewhere (macOS) this does nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    ppid = os.getppid()
    if ppid == 1 or (parent_pid is not None and ppid != parent_pid):
        os._exit(1)
