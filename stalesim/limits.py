"""What this tool handles: the bounds every numeric input is checked against, up front.

A bad or absurd number (a negative batch count, a NaN time, a million stages, a
layer that takes 1e300 s) must be answered at once, in one line naming the
field, never by a hang, an ``OverflowError`` deep in the simulator or a silent
``inf``. Every entry point (argparse types in :mod:`stalesim.cli.common`, the
profile and hardware JSON readers, :class:`~stalesim.runtime.config.TrainConfig`,
``ValidateConfig``, ``SimOptions``) checks against the constants here, so the
bounds are the same everywhere and documented once (docs/failure.md).

Why these values: each is far beyond any real use, and small enough that sums
and products of them stay finite in float64 (so a simulated time never becomes
``inf``) and that work proportional to them stays bounded.

* ``MAX_COUNT`` (2^20): counts of things (stages, batches, micro-batches, workers,
  layers, iterations, batch sizes, ranks). The schedule IR has the same bound
  (``stalesim.schedule.ir.MAX_DIMENSION``) plus a bound on the product.
* ``MAX_SECONDS`` (1e6 s, 11.6 days): one layer's time, one action, a latency,
  a timeout.
* ``MAX_BYTES`` (2^60, 1 EiB): sizes of tensors, memories, messages.
* ``MAX_FLOPS`` (1e24): FLOPs of one layer at one batch.
* ``MAX_RATE`` (1e21 per second): FLOP/s and bytes/s of a device or link.
* ``MIN_RATE`` (1 per second): the slowest link/device that still gives finite times.
* ``MAX_FACTOR`` (1e15): any other real number (learning rates, ratios).
* ``MAX_SEED`` (2^32 - 1): what every random generator used here accepts.
* ``MAX_RANKS`` (1024): processes one local run, calibration or validation spawns.
* ``MAX_THREADS`` (1024): torch threads of one process.
* ``MAX_JOBS`` (256): worker processes of a sweep or study.
* ``MAX_REPEATS`` (10,000): timed repetitions of one measurement.
* Checkpoints (:mod:`stalesim.checkpoint_io`): the pickle part (everything but tensor
  bytes) of a run's checkpoint holds at most ``CHECKPOINT_PICKLE_BASE`` (1 MiB: config,
  run state) plus ``CHECKPOINT_PICKLE_PER_STEP`` (4 KiB, about 25x the 150 bytes a
  step's loss, metrics and version records take) per step and run, plus
  ``CHECKPOINT_PICKLE_PER_TENSOR`` (16 KiB: the records of its weight versions,
  optimizer state, gradients and in-flight copies, ~100 bytes each) per parameter or
  buffer tensor of the model, and never more than ``MAX_CHECKPOINT_PICKLE_BYTES``
  (256 MiB, also the limit when the run's size is not known); plain data nests at
  most ``MAX_CHECKPOINT_DEPTH`` (100) levels (ours: under 10).
* ``MAX_CORPUS_BYTES`` (1 GiB): a text corpus after decompression (Shakespeare's
  complete works are 5.4 MB), so a small gzip bomb cannot unpack into all memory.
* ``STALESIM_MEMORY_BYTES`` (environment): the memory a run may assume it has, when
  it should plan for less than ``MemAvailable`` (a shared machine, a cgroup); see
  :mod:`stalesim.runtime.preflight`.
"""

from __future__ import annotations

import math
from typing import Any

from stalesim.errors import StalesimError

__all__ = [
    "CHECKPOINT_PICKLE_BASE",
    "CHECKPOINT_PICKLE_PER_STEP",
    "CHECKPOINT_PICKLE_PER_TENSOR",
    "MAX_BYTES",
    "MAX_CHECKPOINT_DEPTH",
    "MAX_CHECKPOINT_PICKLE_BYTES",
    "MAX_CORPUS_BYTES",
    "MAX_COUNT",
    "MAX_FACTOR",
    "MAX_FLOPS",
    "MAX_JOBS",
    "MAX_RANKS",
    "MAX_REPEATS",
    "MAX_THREADS",
    "MAX_RATE",
    "MAX_SECONDS",
    "MAX_SEED",
    "MIN_RATE",
    "check_int",
    "check_number",
]

MAX_COUNT = 1 << 20
MAX_SECONDS = 1e6
# a rank group's per-operation deadline: below a second its rendezvous and first barrier cannot finish
MIN_RANK_TIMEOUT_S = 1.0
MAX_BYTES = 1 << 60
MAX_FLOPS = 1e24
MAX_RATE = 1e21
MIN_RATE = 1.0
MAX_FACTOR = 1e15
MAX_SEED = 2**32 - 1
MAX_RANKS = 1024
MAX_THREADS = 1024
MAX_JOBS = 256
MAX_REPEATS = 10_000
CHECKPOINT_PICKLE_BASE = 1 << 20
CHECKPOINT_PICKLE_PER_STEP = 4 << 10
CHECKPOINT_PICKLE_PER_TENSOR = 16 << 10
MAX_CHECKPOINT_PICKLE_BYTES = 256 << 20
MAX_CHECKPOINT_DEPTH = 100
MAX_CORPUS_BYTES = 1 << 30


def check_int(name: str, value: Any, *, lo: int = 0, hi: int = MAX_COUNT) -> int:
    """``value`` as an int in ``[lo, hi]``; StalesimError naming ``name`` otherwise.

    Booleans and floats are refused (``True`` is not a stage count; ``2.5`` is not
    a batch count), so a JSON or Python caller gets the same answer as the CLI."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise StalesimError(f"{name}: expected an integer >= {lo}, got {value!r}")
    if value < lo:
        raise StalesimError(f"{name}: expected an integer >= {lo}, got {value}")
    if value > hi:
        raise StalesimError(f"{name}: {value} is larger than this tool handles (at most {hi:,})")
    return value


def check_number(name: str, value: Any, *, lo: float = 0.0, hi: float = MAX_FACTOR,
                 lo_open: bool = False) -> float:
    """``value`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``).

    NaN and infinity are refused everywhere: they pass ``<``/``>`` checks silently
    and then poison every sum they enter."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StalesimError(f"{name}: expected a number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int too large for a float
        raise StalesimError(f"{name}: {value} is larger than this tool handles (at most {hi:g})") from None
    if not math.isfinite(x):
        raise StalesimError(f"{name}: expected a finite number, got {value!r}")
    if x < lo or (lo_open and x == lo):
        raise StalesimError(f"{name}: expected a number {'>' if lo_open else '>='} {lo:g}, got {value!r}")
    if x > hi:
        raise StalesimError(f"{name}: {value!r} is larger than this tool handles (at most {hi:g})")
    return x


# Compute actions a schedule grid or file may hold: what ``stalesim schedule NAME`` prints and
# ``--json`` exports at most (a grid nobody reads takes minutes to build; a file that long is a
# repeated step better given as a torch CSV)
MAX_SHOWN = 100_000
