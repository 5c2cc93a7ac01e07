"""The torch thread count of every process that trains, by default.

One place for it, below every layer that uses it: the executor's ranks, the emulator and the
studies (through the commands' ``--threads``), the Python API and the profiler all default to
it, so a measured profile, an emulation and a real run sum in the same order.

Why one thread: torch's CPU kernels sum in a thread-count-dependent order, so one thread makes
a run's numbers the same on every machine and equal to the executor's ranks (which run one
thread each); and it is also the fastest measured here: LeNet-5, 150 stale iterations on the
busy 2-core box took 4.4 s with 1 thread, 12.3 s with 2 (torch's default there), because
OpenMP threads spin-wait against each other and every other process. More threads pay off
only for big models on an idle many-core machine: pass ``--threads N`` (``threads=N``) there.
"""

from __future__ import annotations

__all__ = ["DEFAULT_THREADS"]

DEFAULT_THREADS = 1
