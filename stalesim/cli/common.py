"""Small helpers shared by the command modules (argument types, JSON output).

Every numeric argparse type here checks the bounds of :mod:`stalesim.limits`
(finite, in range, NaN and infinity refused), so a bad number is answered by
argparse before any work starts, in one line naming the flag.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from stalesim.limits import MAX_BYTES, MAX_COUNT, MAX_FACTOR, MAX_SECONDS, MAX_SEED, MIN_RANK_TIMEOUT_S
from stalesim.threads import DEFAULT_THREADS


def int_type(lo: int, hi: int = MAX_COUNT) -> Callable[[str], int]:
    """argparse type: an integer in ``[lo, hi]``, with an error that names the value."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {value}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value} is larger than this tool handles (at most {hi:,})")
        return value

    parse.__name__ = f"integer in [{lo}, {hi}]"
    parse.bounds = ("int", lo, hi)  # type: ignore[attr-defined]  # read by the CLI fuzz test
    return parse


def float_type(lo: float, hi: float = MAX_FACTOR, *, lo_open: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    rel = ">" if lo_open else ">="

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {rel} {lo:g}, got {text!r}") from None
        if not math.isfinite(value) or value < lo or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"expected a finite number {rel} {lo:g}, got {text}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{text} is larger than this tool handles (at most {hi:g})")
        return value

    parse.__name__ = f"number in [{lo:g}, {hi:g}]"
    parse.bounds = ("float", lo, hi, lo_open)  # type: ignore[attr-defined]  # read by the CLI fuzz test
    return parse


positive_int = int_type(1)
nonneg_int = int_type(0)
seed_int = int_type(0, MAX_SEED)
positive_float = float_type(0.0, lo_open=True)
nonneg_float = float_type(0.0)
seconds = float_type(0.0, MAX_SECONDS)
positive_seconds = float_type(0.0, MAX_SECONDS, lo_open=True)
# the least timeout of a rank group (``run``, ``validate``, ``calibrate --timeout``): its rendezvous
# and first collective take about a second on an idle machine, so below that the timeout itself is
# the failure (torch reports it as a traceback from inside the store, or the ranks time out at their
# first barrier after seconds of starting), and it is refused up front as the bad value it is
rendezvous_seconds = float_type(MIN_RANK_TIMEOUT_S, MAX_SECONDS)
fraction = float_type(0.0, 1.0)


def int_list(text: str) -> list[int]:
    """argparse type for comma-separated integers such as a PPV ``7`` or ``2,5``.

    Every item must be an integer: ``1,,2`` or ``2,`` is refused (an empty item is
    a typo, not a request for fewer stages)."""
    parts = [p.strip() for p in text.split(",")]
    if any(p == "" for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r} (an empty item)")
    if len(parts) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{len(parts)} items are more than this tool handles ({MAX_COUNT:,})")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    big = [v for v in values if abs(v) > MAX_BYTES]
    if big:
        raise argparse.ArgumentTypeError(f"{big[0]} is larger than this tool handles")
    return values


def fmt_or_na(x: float | None, spec: str) -> str:
    """``x`` formatted by ``spec``, or ``n/a`` for a value that was not measured (None)."""
    return "n/a" if x is None else format(x, spec)


def hold_standard_streams() -> None:
    """Give every standard stream the command started without (``exec 1>&-``) a stand-in,
    before anything opens a file.

    Why: with descriptor 1 closed, Python sets ``sys.stdout`` to None (a print then failed
    as ``AttributeError`` on flush), and the next file the command opens takes descriptor 1,
    so a rank it starts would print into that file. Stdin and stdout get ``/dev/null`` opened
    read-only: reading gives end of file, and a write fails with ``EBADF``, which the CLI
    reports as it does a full device (``cannot write the output (stdout)``, status 2), while a
    command that prints nothing still succeeds. Stderr gets ``/dev/null`` for writing: nobody
    can read it, and the exit status still says what happened."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            held = os.open(os.devnull, os.O_WRONLY if name == "stderr" else os.O_RDONLY)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)
            # the process's own stream for the rest of its life: no context manager closes it
            stream = open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)
        except OSError:  # no /dev/null: leave Python's own handling
            pass


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


THREADS_HELP = ("torch CPU threads per training process (default 1: fastest measured on a shared "
                "machine, and results that do not depend on the core count; more only pays off "
                "for big models on an idle many-core machine; ignored on CUDA)")


def add_threads_arg(p: argparse.ArgumentParser, what: str = "per training process") -> None:
    """The one ``--threads`` of every command that trains (the rule: :mod:`stalesim.threads`)."""
    from stalesim.limits import MAX_THREADS

    p.add_argument("--threads", type=int_type(1, MAX_THREADS), default=DEFAULT_THREADS,
                   help=THREADS_HELP.replace("per training process", what))


def apply_threads(n: int) -> None:
    """Set this process's torch threads (the in-process commands: emulate)."""
    import torch

    torch.set_num_threads(n)
