"""One writer per output folder: an exclusive lock held for a command's whole life.

Two commands writing into the same ``--out`` would each believe they own it: the
second re-creates ``results.jsonl`` (the first then appends to a deleted file),
and ``table.md`` ends up holding only the second one's runs, while both exit 0.
Merging their records cannot be made safe in general (they may run different
grids, and a run folder cannot hold two runs), so a folder has **one writer at a
time**: every command that writes a run or study folder (``emulate --out``,
``study``, ``run --out``, ``validate``) takes an exclusive ``fcntl.flock`` on
``<folder>/.stalesim.lock`` before its first write and holds it until it exits.
A second writer fails at once, in one line naming the holder (pid, command, start
time), exit status 2.

Why ``flock`` on a file descriptor: the kernel releases it when the holder exits
*in any way* (``SIGKILL``, the OOM killer), so a crashed study never leaves a
stale lock that a ``--resume`` has to be told to ignore; the holder description
written into the file is only read to name the holder in the error. The file is
never removed (removing it would let a third process lock a new file while the
second still holds the old one). The descriptor is close-on-exec, so a spawned
child never holds the lock after its parent dies. Within one process the lock is
re-entrant (a study's command and its library call both take it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from stalesim.atomic import PathLike, check_writable_dir, os_reason
from stalesim.errors import StalesimError

__all__ = ["LOCK_NAME", "folder_lock"]

LOCK_NAME = ".stalesim.lock"
_HOLDER_BYTES = 4096  # what we write and read of the holder description

# folders this process holds: (st_dev, st_ino) -> [fd, depth]
_HELD: dict[tuple[int, int], list[int]] = {}


def _holder() -> bytes:
    cmd = " ".join(["stalesim", *sys.argv[1:]]) if sys.argv else "python"
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
    return json.dumps({"pid": os.getpid(), "command": cmd[:300], "started": started}).encode()[:_HOLDER_BYTES]


def _describe(fd: int) -> str:
    try:
        raw = os.pread(fd, _HOLDER_BYTES, 0)
        info = json.loads(raw.decode("utf-8", "replace") or "{}")
        return (f"pid {int(info['pid'])}, {str(info['command'])[:120]!r}, "
                f"started {str(info['started'])[:40]}")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"  # it has not written its description yet


def _acquire(folder: Path) -> int:
    path = folder / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise StalesimError(f"{path}: cannot open the folder's lock file: {os_reason(exc)}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StalesimError(f"{path}: is not a regular file (the folder's lock file)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StalesimError(
                f"{folder}: in use by another stalesim command ({_describe(fd)}); "
                "wait for it to finish or choose another --out") from None
        except OSError as exc:
            raise StalesimError(f"{path}: cannot lock the folder: {os_reason(exc)}") from None
        data = _holder()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its description is missing
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def folder_lock(path: PathLike) -> Iterator[Path]:
    """``with folder_lock(out): ...``: create ``out`` (writable, or a one-line error) and
    hold its lock for the block; a second writer gets a StalesimError naming the holder."""
    folder = check_writable_dir(path)
    st = os.stat(folder)
    key = (st.st_dev, st.st_ino)
    if key in _HELD:
        _HELD[key][1] += 1
    else:
        _HELD[key] = [_acquire(folder), 1]
    try:
        yield folder
    finally:
        entry = _HELD[key]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[key]
            os.close(entry[0])  # closing the last descriptor releases the flock
