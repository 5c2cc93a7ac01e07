"""Where a CPU rank's threads may run: its own share of the host's cores.

Left to the kernel, the ranks of a pipeline on one host move between cores. A rank that
waits for a message sleeps; when the message arrives the kernel wakes it on whichever
core looks free, often the one the other rank has just left, and the rank's next action
then starts with its weights and activations in the other core's private caches.
Measured on this project's 2-vCPU machine (``experiments/bench_wake.py``: ResNet-20 at
batch 16, one process, forward and backward timed after a 30 ms sleep and compared with
back-to-back ones): waking on the same core cost the forward 1% and the backward 7%;
waking on the other core cost them 17% and 18%. That is the size of the slowdown the unpinned executor's ranks
showed in every schedule whose ranks wait often (compute 8-20% above the same stages
timed back to back, in `gpipe` with one micro-batch), and it comes and goes with the
kernel's choices, so no cost model predicts it. Pinned, the gloo threads of a rank
also wake on its own core, which removed 50-95% of the message stall time
(docs/validate.md, the stall experiment).

With ``STALESIM_PIN=on`` the executor pins each CPU rank, with every thread it has or
will start, to an equal contiguous share of the cores this process may use
(``os.sched_getaffinity``), by its local rank: what ``torch.backends.xeon.run_cpu`` and
MPI launchers do for CPU training. Where the ranks outnumber the cores there is no share
to give and nothing is pinned. GPU ranks are left alone (their host threads' placement
is a NUMA question this module does not know the answer to). The processes that time a
run's stages and the co-runners that load the other cores are pinned the same way then
(:mod:`stalesim.validate.stagetime`, :mod:`stalesim.validate.corunners`).

Why opt-in: ``validate`` times every stage in one process, pinned as rank 0, so with
pinned ranks a stage that runs on another rank's core is timed on the wrong core. On
this project's VM, ResNet-32 on 2 pinned ranks, device 1's compute over its prediction
exceeded device 0's by 2.3 points on average over 18 schedules (up to 9), and the
issue's ResNet-32 validation went from 1.3% / 3.9% median / max time error unpinned (an
earlier session) to 4.7% / 10.2% pinned.
Until the stage timing times each stage on its own rank's core, pinning is a choice
for runs, not the default.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

#: ``STALESIM_PIN=on`` pins every CPU rank to its share of the cores (off by default)
PIN_ENV = "STALESIM_PIN"


def pinning_enabled() -> bool:
    """Is pinning on? Off unless ``STALESIM_PIN`` is ``on`` (or ``1``/``yes``/``true``)."""
    return os.environ.get(PIN_ENV, "").strip().lower() in ("on", "1", "yes", "true")


def available_cores() -> list[int]:
    """The cores this process may run on, sorted (all of them where the OS cannot say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def rank_cores(local_rank: int, local_world: int, cores: Sequence[int]) -> list[int] | None:
    """The share of ``cores`` of rank ``local_rank`` among ``local_world`` ranks on this host:
    ``len(cores) // local_world`` contiguous cores each (the remainder unused), or None where
    the ranks outnumber the cores (no share to give) or there is one rank (all of them)."""
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise ValueError(f"local rank {local_rank} of {local_world}")
    k = len(cores) // local_world
    if local_world == 1 or k < 1:
        return None
    return list(cores[local_rank * k:(local_rank + 1) * k])


def pin_process(cores: Sequence[int]) -> bool:
    """Restrict every thread of this process to ``cores``; threads it starts later inherit
    the calling thread's set. Returns False where the OS has no affinity call."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    want = set(cores)
    os.sched_setaffinity(0, want)
    with contextlib.suppress(OSError):  # threads already running (torch's pools, if any)
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), want)
    return True


def pin_rank(local_rank: int, local_world: int, device_kind: str = "cpu") -> list[int] | None:
    """Pin this process as local rank ``local_rank`` of ``local_world`` CPU ranks on this host
    (module doc). Returns the cores it is pinned to, or None where nothing was pinned (a GPU
    rank, ``STALESIM_PIN`` not on, one rank, more ranks than cores, no affinity call)."""
    if device_kind != "cpu" or not pinning_enabled():
        return None
    share = rank_cores(local_rank, local_world, available_cores())
    if share is None or not pin_process(share):
        return None
    return share
