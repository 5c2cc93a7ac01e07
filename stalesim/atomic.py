"""Atomic file writes: a reader (or a run killed mid-write) never sees half a file.

Every result, checkpoint and report goes through here: write to a temporary file
in the same directory, then ``os.replace`` it over the target, which is atomic on
POSIX file systems.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _write_atomic(path: str | os.PathLike[str], mode: str, write: Callable[[IO[Any]], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    return _write_atomic(path, "w", lambda fh: fh.write(text))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    return _write_atomic(path, "wb", lambda fh: fh.write(data))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    def dump(fh: IO[str]) -> None:
        json.dump(obj, fh, indent=2, allow_nan=False)
        fh.write("\n")

    return _write_atomic(path, "w", dump)


def torch_save_atomic(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` that leaves either the old checkpoint or the new one, never a torn file."""
    import torch

    return _write_atomic(path, "wb", lambda fh: torch.save(obj, fh))
