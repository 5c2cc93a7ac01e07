"""Ranks that outnumber the host's cores: the operating system time-slices their compute.

The contended stage times (:mod:`stalesim.validate.stagetime`) are measured with N-1
co-runners busy beside the timed process, so with N ranks of ``threads`` threads on C cores
they hold two things: what sharing the socket costs (memory bandwidth, caches, the clock),
and, when N x threads > C, the time slices the processes take turns in. The first grows
with the number of ranks computing at once about linearly, which is what the cost model's
interpolation weight ``phi`` assumes (:func:`stalesim.validate.costmodel.busy_overlap`).
The second does not: k busy ranks on C cores each get min(1, C / (k x threads)) of a core,
so with 3 ranks on 2 cores two computing ranks run at full speed and three at 2/3. Linear
in the number of others busy, the contended 1.6-1.9x of a 3-rank layout charged a rank that
overlapped one other rank half of that excess, although two ranks on two cores each have a
core (ResNet-20, B = 72, 3 ranks on this 2-core machine: the schedules whose ranks overlap
most were predicted 15-24% too slow; docs/validate.md).

So the time-slice share is taken out of the contended times and charged by itself: a
compute action costs ``((1 - phi) x alone + phi x contended / share(N)) x mean share``, the
mean share over the device's busy time in the simulated timeline, iterated with ``phi`` to
their fixed point. Where the ranks do not outnumber the cores (every 2-rank run on two
cores, every GPU run) every share is 1 and nothing changes. The cores come from the
process's CPU affinity when the validation runs, once per machine; nothing is fitted.
What it leaves out: the ranks' communication threads, which also need a core (the
"host cores as a resource" proposal in docs/validate.md), and how the kernel picks which
of the runnable ranks waits (a pipeline's critical rank may wait its turn behind one whose
work nobody needs yet).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.result import SimResult


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def core_share(busy: int, cores: int | None, threads: int = 1) -> float:
    """How many times longer a compute action takes when ``busy`` ranks of ``threads`` threads
    each compute at once on ``cores`` cores: max(1, busy x threads / cores); 1 when the cores
    are not known."""
    if not cores or cores <= 0:
        return 1.0
    return max(1.0, busy * max(1, threads) / cores)


def busy_concurrency(result: SimResult) -> list[dict[int, int]]:
    """Per device of the simulated timeline, inside its steady window: the ns of its busy time
    (compute actions and transfers' CPU jobs) during which k devices, itself included, were
    busy, by k."""
    from stalesim.validate.afterwait import busy_intervals

    if result.timeline is None:
        raise ValueError("busy_concurrency: needs an event-simulation result")
    n = result.devices
    lo, hi = result.steady_window_ns()
    events: list[tuple[int, int, int]] = []
    for d, dev in enumerate(busy_intervals(result)):
        for s0, e0, _ in dev:
            a, b = max(s0, lo), min(e0, hi)
            if b > a:
                events += [(a, 1, d), (b, -1, d)]
    events.sort(key=lambda x: (x[0], x[1]))
    depth = [0] * n
    hist: list[dict[int, int]] = [{} for _ in range(n)]
    prev = events[0][0] if events else 0
    for t, delta, d in events:
        if t > prev:
            active = [i for i in range(n) if depth[i] > 0]
            for i in active:
                hist[i][len(active)] = hist[i].get(len(active), 0) + t - prev
            prev = t
        depth[d] += delta
    return hist


def busy_share(result: SimResult, cores: int | None, threads: int = 1) -> list[float]:
    """Per device: the mean :func:`core_share` over its busy time in the simulated timeline
    (1.0 where it never computes)."""
    out = []
    for h in busy_concurrency(result):
        total = sum(h.values())
        out.append(sum(t * core_share(k, cores, threads) for k, t in h.items()) / total if total else 1.0)
    return out
