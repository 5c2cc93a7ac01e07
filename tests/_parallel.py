"""The suite under pytest-xdist (``make test`` runs 2 workers): which tests run with nothing beside them.

A test that bounds a wall time or a measured cost (a message that may cost the compute at most
3 ms, a hung rank that must be killed within its deadline) measures this machine: with a second
worker busy beside it on 2 cores, the same test measures the other worker's load instead. Such
a test is named in :data:`ALONE` and runs alone: it waits until the other workers' current test
ends, and they start no new test until it ends.

The mechanism is two ``flock`` files in a folder the controller makes for the run (the workers
inherit its path in :data:`LOCK_ENV`): every test holds the run lock shared, a test named in
:data:`ALONE` holds it exclusive. A test waiting for it exclusive first takes the gate, which the
others pass on their way to the run lock: without it the other workers, taking the run lock in
turn, could keep it shared for ever (``flock`` has no writer preference). Without xdist (one
process) nothing is locked.

``make test`` distributes whole files (``--dist loadfile``): a module-scoped fixture, such as one
rank launch that several tests assert on, then runs once rather than once per worker, and a file's
tests keep their order. Tests in different files that must not overlap go in :data:`ALONE`, not in
an ``xdist_group``: pytest-xdist 3.8 groups by renaming the node id through an attribute that
pytest 9 no longer reads, so ``--dist loadgroup`` spreads a group's tests over the workers.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: the environment variable that hands the lock folder from the controller to its workers
LOCK_ENV = "STALESIM_TEST_LOCK_DIR"

#: node id prefixes of the tests that run alone, with why (a prefix names a file, a test or one case)
ALONE: dict[str, str] = {
    "tests/integration/test_validate_commcal.py::test_two_cpu_ranks_measure_every_quantity_at_every_size":
        "bounds the compute a message costs (3 ms): a busy second worker deschedules the ranks for longer",
    "tests/integration/test_cli_fuzz.py":
        "every command line must end within its limit (LIMIT_S): a busy second worker adds its load to each",
    "tests/integration/test_badinput_soak.py":
        "each case's process must end within 20 s (training ones 90 s), two at a time: both cores",
    "tests/integration/test_executor_faults.py::test_crashed_rank_stops_every_rank":
        "bounds how long the failing ranks take to stop, from their start",
    "tests/integration/test_executor_faults.py::test_hung_rank_times_out_and_is_killed":
        "bounds how long a hung rank takes to be killed, from its start (a 3 s deadline)",
}


def is_alone(nodeid: str) -> bool:
    """Whether the test ``nodeid`` is one that must run with nothing beside it."""
    return any(nodeid == p or nodeid.startswith((p + "[", p + "::")) for p in ALONE)


@contextmanager
def turn(folder: Path, alone: bool) -> Iterator[None]:
    """Hold the run lock for one test: shared, or exclusive (through the gate) when ``alone``."""
    with open(folder / "gate", "a") as gate, open(folder / "run", "a") as run:
        if alone:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(run, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)  # waits while an alone test waits for the run lock
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(run, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
