"""Small helpers shared by the command modules (argument types, JSON output)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with an error that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def nonneg_float(text: str) -> float:
    """argparse type: a finite number >= 0 (NaN and infinity are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def int_list(text: str) -> list[int]:
    """argparse type for comma-separated integers such as a PPV ``7`` or ``2,5``."""
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write JSON so that a reader never sees a half-written file (see :mod:`stalesim.atomic`)."""
    from stalesim.atomic import write_json_atomic as _write

    _write(path, obj)


def add_extrapolate_arg(p: argparse.ArgumentParser) -> None:
    """``--extrapolate``: how profile times are carried outside the profiled batch sizes."""
    p.add_argument(
        "--extrapolate", choices=("conservative", "trend"), default="conservative",
        help="costs at batch sizes outside the profiled ones: conservative (default; never a "
             "per-sample cost lower than measured: below the range at least the smallest "
             "measured batch's, above it the best measured) or trend (extend the line through "
             "the two nearest measured batch sizes; may predict efficiency no measurement "
             "showed). Results say which costs were extrapolated.")
