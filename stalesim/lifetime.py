"""No process outlives the one that started it.

A rank of ``stalesim run`` and a worker of ``stalesim study`` do minutes of work
and write into run folders. If their parent is killed with ``SIGKILL`` (which
cannot be caught, so the parent cannot clean up), an orphaned child would go on
training and writing into folders that a ``--resume`` started next is already
using. So every child asks the kernel to ``SIGKILL`` it when its parent dies
(Linux ``prctl(PR_SET_PDEATHSIG)``), and exits at once if the parent is already
gone (the parent may die between the fork and the ``prctl``).

Children that must start as fresh processes (a stage timing, a co-runner, a study's
worker) come from :func:`fresh_context`: a fork server that has imported torch and
nothing else, where the platform has one. A spawned child imports torch again, 2-3 s
of CPU each (a short ``validate`` starts about ten). A forked server child is as
fresh as a spawned one in what it measures (it has computed nothing, allocated no
tensor, started no thread pool), but it has the server's environment, from when the
server started: :func:`adopt` gives it the parent's, so both start methods see the
same variables. Its parent is the server, which outlives a killed client while any
of the client's children lives (they hold the client's end of the server's liveness
pipe), so ``PR_SET_PDEATHSIG`` cannot end it: :func:`adopt` watches the process that
asked for it instead (a thread blocked on a pidfd, which wakes only when that process
exits) and kills the child then.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext, SpawnContext

__all__ = ["Parent", "adopt", "die_with_parent", "fresh_context"]

#: what the fork server imports before it forks anything (numpy comes with torch)
PRELOAD = ("torch",)

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent exits.

    ``parent_pid`` is the pid of the process that started us (it passes
    ``os.getpid()``); if our parent is no longer that process and that process is
    gone, it died before the ``prctl`` took effect and we exit now (a fork server's
    child has the server as its parent, while the process that asked for it lives).
    Without it, a parent of 1 (init) means the same. Elsewhere (macOS) this does
    nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    ppid = os.getppid()
    if ppid == 1 or (parent_pid is not None and ppid != parent_pid and not _alive(parent_pid)):
        os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (a reused pid)
        return True
    return True


def fresh_context() -> ForkServerContext | SpawnContext:
    """The multiprocessing context for a child that must start fresh: the fork server with
    :data:`PRELOAD` imported where the platform has one (Linux, macOS), else spawn. Its
    children call :func:`adopt` first."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when the server starts (once per process)
    return ctx


@dataclass(frozen=True)
class Parent:
    """What a child needs to stand where a spawned child of this process would: the
    pid to die with and the environment to run in."""

    pid: int
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def here(cls) -> Parent:
        return cls(os.getpid(), dict(os.environ))


def adopt(parent: Parent) -> None:
    """In a child of :func:`fresh_context`: take ``parent``'s environment (a fork server's
    child has the server's) and die with ``parent``."""
    if os.environ != parent.env:
        os.environ.clear()
        os.environ.update(parent.env)
    die_with_parent(parent.pid)
    if os.getppid() != parent.pid:
        _die_with(parent.pid)


def _die_with(pid: int) -> None:
    """SIGKILL this process when ``pid`` (not our parent) exits, as ``PR_SET_PDEATHSIG``
    would: a daemon thread blocked on the process's pidfd (Linux 5.3+), else polling it."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _alive(pid):
                time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="stalesim-die-with", daemon=True).start()
