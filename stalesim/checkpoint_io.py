"""Loading a checkpoint safely: tensors and plain data only, one-line errors.

``torch.load(..., weights_only=False)`` runs whatever a pickle says, so a
crafted ``checkpoint.pt`` could execute code on ``--resume``. Our checkpoints
hold only tensors and plain containers (dict, list, tuple, int, float, str,
bool, None), which ``weights_only=True`` reads; anything else is refused
before a single object is built, and reported as one line. The same goes for
a file that is torn, empty, not a torch file, or lacks our keys: resume says
which file and why (never a traceback, never code execution).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError


def load_checkpoint(path: Path, *, what: str, map_location: Any = None) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` as a dict; StalesimError on anything else."""
    import torch

    if not path.is_file():
        raise StalesimError(f"{what}: no checkpoint at {path}")
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
    return state


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
