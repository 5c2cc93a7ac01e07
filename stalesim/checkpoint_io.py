"""Loading a checkpoint safely: tensors and plain data only, bounded, one-line errors.

``torch.load(..., weights_only=False)`` runs whatever a pickle says, so a
crafted ``checkpoint.pt`` could execute code on ``--resume``. Our checkpoints
hold only tensors and plain containers (dict, list, tuple, int, float, str,
bool, None), which ``weights_only=True`` reads; anything else is refused
before a single object is built, and reported as one line. The same goes for
a file that is torn, empty, not a torch file, or lacks our keys: resume says
which file and why (never a traceback, never code execution).

Plain data can still be hostile, so every read is **bounded** before torch
sees the file (:func:`read_checkpoint`; every checkpoint read goes through it):

* **size**: the file must fit in the memory free to load it, and its pickle
  part (``data.pkl``: everything but tensor bytes, which torch's pure-Python
  ``weights_only`` unpickler reads at about a million objects a second) at most
  :func:`pickle_cap` of the run: a checkpoint holds a fixed part, a few records per
  step and per model tensor, so 240 MB of small ints in a 100-step run's
  checkpoint is refused from its size, at once, instead of after a minute of
  unpickling (and one under the cap unpickles in about a second);
* **shape**: the pickle's opcodes are scanned (no object is built) and a file
  whose unpickling stack grows beyond :data:`MAX_PICKLE_STACK` (a million nested
  lists pushed before any is closed) is refused within milliseconds;
* **nesting**: the loaded object is walked without recursion; deeper than
  :data:`~stalesim.limits.MAX_CHECKPOINT_DEPTH` or containing itself is refused,
  so no later comparison or error message can hit ``RecursionError``.

Values from a checkpoint quoted in an error go through :func:`brief` (bounded).
"""

from __future__ import annotations

import os
import pickle
import pickletools
import reprlib
import stat
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.limits import (
    CHECKPOINT_PICKLE_BASE,
    CHECKPOINT_PICKLE_PER_STEP,
    CHECKPOINT_PICKLE_PER_TENSOR,
    MAX_CHECKPOINT_DEPTH,
    MAX_CHECKPOINT_PICKLE_BYTES,
)

__all__ = ["MAX_PICKLE_STACK", "brief", "load_checkpoint", "mismatch", "pickle_cap", "read_checkpoint",
           "require_keys"]

# pickle's own writer pushes at most 1,000 items (a batch of APPENDS / SETITEMS: 2,000 for
# key-value pairs) between a MARK and the op that consumes them; nested containers add one
# entry each. Our checkpoints stay far below this.
MAX_PICKLE_STACK = 100_000

_brief = reprlib.Repr()
_brief.maxstring = 60
_brief.maxother = 60
_brief.maxlevel = 3


def brief(value: Any) -> str:
    """A bounded ``repr`` of a value read from a checkpoint (for error messages)."""
    return _brief.repr(value)


def pickle_cap(steps: int | None, runs: int = 1, tensors: int = 0) -> int:
    """Bytes of pickle a checkpoint of ``runs`` runs of ``steps`` steps of a model with
    ``tensors`` parameter and buffer tensors may hold (:mod:`stalesim.limits`); without a
    length, the stated :data:`~stalesim.limits.MAX_CHECKPOINT_PICKLE_BYTES`."""
    if steps is None:
        return MAX_CHECKPOINT_PICKLE_BYTES
    need = (CHECKPOINT_PICKLE_BASE + CHECKPOINT_PICKLE_PER_STEP * max(int(steps), 0) * max(int(runs), 1)
            + CHECKPOINT_PICKLE_PER_TENSOR * max(int(tensors), 0))
    return min(MAX_CHECKPOINT_PICKLE_BYTES, need)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _pickle_part(path: Path, what: str, cap: int) -> bytes:
    """The bytes of the archive's ``data.pkl`` (at most ``cap``); one-line errors."""
    try:
        with zipfile.ZipFile(path) as z:
            names = [i for i in z.infolist() if i.filename.rsplit("/", 1)[-1] == "data.pkl"]
            if len(names) != 1:
                raise StalesimError(f"{what}: cannot read checkpoint {path} (not a torch checkpoint: "
                                    f"{len(names)} pickles in the archive)")
            info = names[0]
            if info.file_size > cap:
                raise StalesimError(
                    f"{what}: checkpoint {path} is not one this run wrote: its pickle part has "
                    f"{info.file_size:,} bytes, more than this run's checkpoints hold (at most {cap:,})")
            with z.open(info) as fh:
                data = fh.read(cap + 1)
    except StalesimError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise StalesimError(f"{what}: cannot read checkpoint {path} (torn or not a torch file: "
                            f"{type(exc).__name__})") from None
    except OSError as exc:
        raise StalesimError(f"{what}: cannot read checkpoint {path} ({exc.strerror or exc})") from None
    if len(data) > cap:  # the archive's directory lied about the size
        raise StalesimError(f"{what}: checkpoint {path} is not one this run wrote (pickle part larger "
                            f"than {cap:,} bytes)")
    return data


# Opcodes that build an object from a class the old way (protocol 0/1) or through the extension
# registry: torch.save never writes them and the weights-only unpickler refuses them, but only
# after torch formats its refusal with regular expressions that take seconds on a long message
# (a pickle repeating one of them thousands of times); refused here, in one pass.
REFUSED_OPCODES = frozenset({"OBJ", "INST", "EXT1", "EXT2", "EXT4"})
# The same for a GLOBAL naming a class: torch's own names are tens of characters
MAX_GLOBAL_NAME = 256


def _scan(data: bytes, path: Path, what: str) -> None:
    """Walk the opcodes (building nothing); refuse an unpickling stack beyond MAX_PICKLE_STACK,
    the opcodes of :data:`REFUSED_OPCODES` and class names beyond :data:`MAX_GLOBAL_NAME`."""
    depth = 0
    marks: list[int] = []
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in REFUSED_OPCODES or op.name == "GLOBAL" and len(str(arg)) > MAX_GLOBAL_NAME:
                raise StalesimError(
                    f"{what}: {path} is not a stalesim checkpoint: it holds objects other than tensors "
                    f"and plain data, which are refused ({op.name})")
            before, after = op.stack_before, op.stack_after
            if op.name == "MARK":
                marks.append(depth)
                continue
            if pickletools.markobject in before:
                if not marks:
                    raise ValueError("unbalanced MARK")
                depth = marks.pop() - before.index(pickletools.markobject)
            else:
                depth -= len(before)
            depth += len(after)
            if depth + len(marks) > MAX_PICKLE_STACK:
                raise StalesimError(
                    f"{what}: checkpoint {path} is not one this run wrote: its data nests or piles up "
                    f"more than {MAX_PICKLE_STACK:,} objects deep")
    except StalesimError:
        raise
    except (ValueError, KeyError, IndexError) as exc:  # genops on a torn or foreign pickle
        raise StalesimError(f"{what}: cannot read checkpoint {path} (torn or not a torch file: "
                            f"{type(exc).__name__})") from None


def _children(item: Any) -> list[Any] | None:
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, (list, tuple, set, frozenset)):
        return list(item)
    return None  # a leaf: a number, a string, a tensor


def _check_nesting(obj: Any, path: Path, what: str) -> None:
    """Nesting at most MAX_CHECKPOINT_DEPTH and no container inside itself, found without
    recursion; each container is measured once (its height remembered), so a structure
    that shares containers (2^n paths through n of them) costs n, not 2^n."""
    height: dict[int, int] = {}  # id -> levels of containers from it down (itself included)
    on_path: set[int] = set()
    keep: list[Any] = []  # the ids above stay valid while we hold the objects
    stack: list[tuple[Any, list[Any] | None]] = [(obj, None)]
    while stack:
        item, kids = stack[-1]
        key = id(item)
        if kids is None:  # entering
            kids = _children(item)
            if kids is None or key in height:
                stack.pop()
                continue
            if key in on_path:
                raise StalesimError(f"{what}: checkpoint {path} is not one this run wrote (a container "
                                    "holds itself)")
            if len(on_path) >= MAX_CHECKPOINT_DEPTH:
                raise StalesimError(f"{what}: checkpoint {path} is not one this run wrote (data nested "
                                    f"more than {MAX_CHECKPOINT_DEPTH} levels deep)")
            on_path.add(key)
            keep.append(item)
            stack[-1] = (item, kids)
            stack.extend((k, None) for k in kids if _children(k) is not None and id(k) not in height)
            continue
        stack.pop()  # leaving: every child is measured
        h = 1 + max((height.get(id(k), 0) for k in kids), default=0)
        if h > MAX_CHECKPOINT_DEPTH:
            raise StalesimError(f"{what}: checkpoint {path} is not one this run wrote (data nested "
                                f"more than {MAX_CHECKPOINT_DEPTH} levels deep)")
        height[key] = h
        on_path.discard(key)


def read_checkpoint(path: Path, *, what: str, map_location: Any = None, steps: int | None = None,
                    runs: int = 1, tensors: int = 0) -> dict[str, Any]:
    """The checkpoint at ``path`` as a dict, read with every bound of the module doc
    (``steps``, ``runs``, ``tensors``: what the run that wrote it holds, for :func:`pickle_cap`);
    StalesimError naming ``path`` on anything else."""
    import torch

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StalesimError(f"{what}: no checkpoint at {path}") from None
    except OSError as exc:
        raise StalesimError(f"{what}: cannot read checkpoint {path} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise StalesimError(f"{what}: no checkpoint at {path} (not a regular file)")
    free = _available_memory()
    if free is not None and st.st_size > free:
        raise StalesimError(f"{what}: checkpoint {path} has {st.st_size:,} bytes, more than the memory "
                            f"free to load it ({free:,})")
    data = _pickle_part(path, what, pickle_cap(steps, runs, tensors))
    _scan(data, path, what)
    del data
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise StalesimError(
            f"{what}: {path} is not a stalesim checkpoint: it holds objects other than tensors "
            "and plain data, which are refused (weights_only=True)") from None
    except Exception as exc:  # noqa: BLE001 - torn, empty or foreign file
        raise StalesimError(f"{what}: cannot read checkpoint {path} (torn or not a torch file: "
                            f"{type(exc).__name__})") from None
    if not isinstance(state, dict):
        raise StalesimError(f"{what}: {path} is not a stalesim checkpoint (holds a "
                            f"{type(state).__name__}, not a dict)")
    _check_nesting(state, path, what)
    return state


def load_checkpoint(path: Path, *, what: str, map_location: Any = None) -> dict[str, Any]:
    """:func:`read_checkpoint` without the run's length (the stated size limit applies)."""
    return read_checkpoint(path, what=what, map_location=map_location)


def require_keys(state: dict[str, Any], keys: Iterable[str], path: Path, what: str) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise StalesimError(f"{what}: {path} is not a stalesim checkpoint (missing {', '.join(missing)})")


def mismatch(path: Path, what: str, exc: BaseException) -> StalesimError:
    """A checkpoint whose contents do not fit this run (shapes, keys, types)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:200] + ("..." if len(text) > 200 else "")
    return StalesimError(f"{what}: checkpoint {path} does not fit this run "
                         f"({type(exc).__name__}{': ' + text if text else ''})")
