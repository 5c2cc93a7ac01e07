"""The host heap policy of a process that trains: keep freed memory instead of returning it.

A CPU rank frees a stage's activations after every backward and allocates them again in
the next forward. glibc's defaults return freed memory at the top of the heap to the
kernel (its trim threshold) and serve large blocks with fresh ``mmap`` calls under a
threshold that moves with the heap's history, so the next forward page-faults the same
bytes back in. Measured on ResNet-32 at batch 64 (one stage of 13 blocks, 2-core VM): 0 to
13,000 minor faults per action depending on the process's past, each action 5-40% slower
than with no faults, and two processes running the same stage differing by 13%. With the
heap kept (no trim; every block from the heap) every action after the first
iteration faults nothing and its time is steady: the behaviour of a GPU's caching
allocator, and what makes a stage timed in one process predict the same stage in a rank.

``mallopt`` sets it at run time (glibc reads ``GLIBC_TUNABLES`` only at start-up, which a
rank started by ``torchrun`` does not control). Both settings go together: a trim
threshold alone switches off glibc's moving ``mmap`` threshold, which leaves it at 128 KiB
and made every action 2-2.5x slower (every activation a fresh ``mmap``).

Blocks above the largest threshold glibc accepts (32 MiB) would still be ``mmap``ed at each
allocation and unmapped at each free, so a stage with a large weight matrix faults its
gradient in page by page at every backward: AlexNet's 4096 x 4096 layer (a 64 MiB gradient)
took 16,385 minor faults per backward on a 2-core VM, about 28 ms of a 60 ms backward at
micro-batch 8, and each micro-batch that adds its gradient into the batch's buffer faulted a
second 64 MiB block. Whether a block that large was faulted in or came from a free chunk of
the heap depended on the process's history, so the same stage timed in one process and run
in a rank disagreed by up to 1.5x. So ``mmap`` is off for the main heap too (``M_MMAP_MAX``
0): every block comes from the heap, and a freed one is reused. glibc still maps memory
where the heap cannot grow, and for the arenas of other threads, so no allocation fails for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
#: the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
MMAP_THRESHOLD_BYTES = 32 << 20
#: never trim: ``mallopt`` takes a C int
TRIM_THRESHOLD_BYTES = (1 << 31) - 1
#: ``STALESIM_HEAP=default`` leaves glibc's policy as it is (for A/B measurements, or a
#: host where a rank must give memory back between iterations)
HEAP_ENV = "STALESIM_HEAP"


def keep_heap() -> bool:
    """Set this process's glibc heap to keep freed memory (module doc). Returns whether it
    was set (False where the C library is not glibc, or ``STALESIM_HEAP=default``: nothing
    is changed then)."""
    if os.environ.get(HEAP_ENV, "") == "default":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # the mmap threshold first: setting either switches off glibc's moving threshold
    return (bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
            and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
            and bool(mallopt(_M_MMAP_MAX, 0)))
