"""Steady-state periods: detect them in a short event run and extrapolate to N batches.

A schedule's device lists repeat one pattern per batch between fill and drain,
and the engine is deterministic with integer times, so once the run reaches
its periodic regime every action of batch t + c happens exactly ``shift`` ns
after the same action of batch t. Nothing after that needs simulating: the run
of N batches is the short run of n batches with (N - n) / c copies of one period
inserted in its middle, everything after the insertion shifted by whole
periods (the generators build an N-batch order from an n-batch one by exactly
such an insertion: 1F1B's steady pairs, the register pipeline's cycles, one
flush per batch).

**Detection.** Each batch's actions (compute, sends with their channel start,
all-reduce starts with their collective's span, waits) sorted by identity give
one row of times. Period (first, c, shift) is found when rows t + c - rows t are
one constant ``shift`` for ``2R + c + 1`` consecutive t, where R (the
*memory*) is the largest batch distance between consecutive actions of one
device: the state that decides the future (device clocks, channel and ring
free times, messages in flight) is made of the times of actions at most R
batches back, so a shifted copy of a long enough stretch is a shifted state,
and the future repeats. The per-batch quantities derived from the run (busy
time per device between consecutive batch completions, all-reduce waits) are
checked periodic over the same stretch too.

**Extrapolation** maps batch k of the N-run to a batch of the n-run plus a
number of periods (:meth:`Period.source`) for every per-batch quantity the
result needs: completion times, busy time between completions (hence the
utilization over any window), all-reduce waits; the makespan is the n-run's
plus the inserted periods. Equal to the event simulation of all N batches to
the nanosecond (tested); hardware whose transfers take core time (CPU ranks)
is simulated in full instead, since its core-time jobs are not part of the rows.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from stalesim.schedule.actions import TRANSFER_KINDS, Kind
from stalesim.sim.events import Timeline


@dataclass(frozen=True)
class Period:
    """Batches t >= ``first`` repeat every ``length`` batches, ``shift_ns`` later.

    ``safe_end``: batches below it are identical in the short run and any longer
    run (see the module doc); ``inserted``: periods inserted to reach the target.
    """

    first: int
    length: int
    shift_ns: int
    memory: int
    safe_end: int
    inserted: int = 0

    def source(self, k: int) -> tuple[int, int]:
        """(batch of the short run, periods to add) that batch ``k`` of the long run copies."""
        b, c, j = self.safe_end, self.length, self.inserted
        if k < b:
            return k, 0
        if k >= b + j * c:
            return k - j * c, j
        q = -(-(k - b + 1) // c)
        return k - q * c, q


def batch_memory(tl: Timeline) -> int:
    """Largest batch distance between consecutive actions of one device, plus one."""
    mem = 0
    for acts in tl.program.sched.device_actions:
        for a, b in zip(acts, acts[1:]):
            d = abs(a.batch - b.batch)
            if d > mem:
                mem = d
    return mem + 1


def batch_rows(tl: Timeline, n: int) -> np.ndarray | None:
    """(n, A, 4) int64: per batch, per action (sorted by identity) its start, end,
    channel start (sends; else start) and collective start/done (all-reduce starts;
    else start/end); None when the batches do not hold the same actions."""
    prog = tl.program
    acts = prog.actions
    G = len(acts)
    if G % n:
        return None
    A = G // n
    kinds = {k: i for i, k in enumerate(Kind)}
    ident = np.array([(a.batch, kinds[a.kind], a.worker, a.stage, -1 if a.micro is None else a.micro)
                      for a in acts], dtype=np.int64).reshape(G, 5)
    order = np.lexsort(ident[:, ::-1].T)  # by batch, then kind, worker, stage, micro
    rows = ident[order].reshape(n, A, 5)
    if (rows[:, :, 0] != np.arange(n)[:, None]).any() or (rows[:, :, 1:] != rows[:1, :, 1:]).any():
        return None
    start = np.asarray(tl.start, dtype=np.int64)
    end = np.asarray(tl.end, dtype=np.int64)
    vals = np.stack([start, end, start, end], axis=1)
    for g, (xs, _arr) in tl.xfer.items():
        vals[g, 2] = xs
    for ops in prog.ops:
        for op in ops:
            if op[0] == 3:  # AR: its collective's span
                vals[op[1], 2], vals[op[1], 3] = tl.coll_span[op[4]]
    return vals[order].reshape(n, A, 4)


def detect(tl: Timeline, n: int, *, first: int = 0, max_length: int = 4,
           extra: np.ndarray | None = None) -> Period | None:
    """The earliest period (smallest length first) after batch ``first`` in a run of
    ``n`` batches, or None. ``extra``: (n, k) per-batch quantities that must repeat
    too (shifted by 0), e.g. busy increments and waits."""
    if tl.cpu_jobs:
        return None
    rows = batch_rows(tl, n)
    if rows is None:
        return None
    mem = batch_memory(tl)
    for c in range(1, max_length + 1):
        L = 2 * mem + c + 1
        if n - c < first + L:
            break
        diff = rows[c:] - rows[:-c]
        shift = diff[:, 0, 0]
        ok = (diff == shift[:, None, None]).all(axis=(1, 2)) & (shift > 0)
        if extra is not None:  # rows of extra may stop short of n (increments between batches)
            m = max(0, len(extra) - c)
            ok[m:] = False
            ok[:m] &= (extra[c:] == extra[:m]).all(axis=1)
        run = 0
        for t in range(first, n - c):
            if not ok[t]:
                run = 0
            elif run and shift[t] == shift[t - 1]:
                run += 1
            else:
                run = 1
            if run >= L:
                p = t - L + 1
                return Period(first=p, length=c, shift_ns=int(shift[p]), memory=mem,
                              safe_end=p + L + c - mem - 1)
    return None


def busy_at(tl: Timeline, times: list[int]) -> np.ndarray:
    """(devices, len(times)): compute-resource busy time of each device before each time."""
    prog = tl.program
    D = prog.sched.num_devices
    per: list[list[tuple[int, int]]] = [[] for _ in range(D)]
    for g, a in enumerate(prog.actions):
        if a.kind not in TRANSFER_KINDS and tl.end[g] > tl.start[g]:  # compute, as busy_in_window counts it
            per[prog.device_of_gid[g]].append((tl.start[g], tl.end[g]))
    for dd, s0, e0, _ in tl.cpu_jobs:
        per[dd].append((s0, e0))
    out = np.zeros((D, len(times)), dtype=np.int64)
    for d, iv in enumerate(per):
        iv.sort()
        starts = [s for s, _ in iv]
        cum = [0]
        for s, e in iv:
            cum.append(cum[-1] + e - s)
        for j, T in enumerate(times):
            i = bisect.bisect_left(starts, T)  # intervals starting before T
            if i == 0:
                continue
            s, e = iv[i - 1]
            out[d, j] = cum[i - 1] + min(e, T) - s
    return out
