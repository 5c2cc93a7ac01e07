"""Where in the replay an epoch ends and a checkpoint is due, planned once before the replay.

A batch is *done* when all its updates ran; "after step k" means every batch < k is done.
For every checkpoint the forwards in flight there are found in advance, so the weight
versions they read can be reserved (kept in the stash) until the checkpoint saved them.
:class:`ReplayPlan` holds both for one replay.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stalesim.schedule import Action, Kind, Schedule

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.stage import StageRuntime

#: A reserved weight version: (worker, stage, version).
Reservation = tuple[int, int, int]


def plan_events(steps: Sequence[Action], *, units: int, bpe: int, total: int, epochs: bool,
                checkpoints: bool, checkpoint_every: int) -> dict[int, dict[str, Any]]:
    """Replay position -> ``{"done": batches done, "epoch_end": [epochs], "checkpoint": bool}``
    for every position after which a batch becomes done. ``units``: updates per batch
    (stages x workers); ``epochs``: whether epochs end (an epoch-based run); ``checkpoints``:
    whether checkpoints are written at all (every ``checkpoint_every`` batches and at every
    epoch end but the last)."""
    left: dict[int, int] = defaultdict(lambda: units)
    done_upto = 0
    finished: set[int] = set()
    events: dict[int, dict[str, Any]] = {}
    for i, a in enumerate(steps):
        if a.kind is not Kind.U:
            continue
        left[a.batch] -= 1
        if left[a.batch] == 0:
            finished.add(a.batch)
            del left[a.batch]
            start = done_upto
            while done_upto in finished:
                finished.discard(done_upto)
                done_upto += 1
            for k in range(start + 1, done_upto + 1):
                ev = events.setdefault(i, {"done": k, "epoch_end": [], "checkpoint": False})
                ev["done"] = k
                if k % bpe == 0 and epochs:
                    ev["epoch_end"].append(k // bpe - 1)
                if checkpoints and ((checkpoint_every and k % checkpoint_every == 0)
                                    or (k % bpe == 0 and k < total)):
                    ev["checkpoint"] = True
    return events


def checkpoint_reservations(steps: Sequence[Action], events: dict[int, dict[str, Any]],
                            sched: Schedule) -> dict[int, list[Reservation]]:
    """Checkpoint position -> the weight versions of the forwards in flight there (their
    forward ran before it, their backward completes after it: B, or W of a split backward),
    in replay order of the backwards."""
    ck = sorted(i for i, ev in events.items() if ev["checkpoint"])
    out: dict[int, list[Reservation]] = defaultdict(list)
    if not ck:
        return out
    f_at: dict[tuple, int] = {}
    spans = []
    for i, a in enumerate(steps):
        if a.kind is Kind.F:
            f_at[(a.worker, a.stage, a.batch, a.micro)] = i
        elif a.kind is Kind.B or a.kind is Kind.W:  # the backward completes (W: split)
            key = (a.worker, a.stage, a.batch, a.micro)
            spans.append((f_at.pop(key), i, key))
    table = sched.table
    for fi, bi, (w, s, t, m) in spans:
        j = bisect.bisect_left(ck, fi)
        while j < len(ck) and ck[j] < bi:
            out[ck[j]].append((w, s, table.v_f(s, t, m, w)))
            j += 1
    return out


class ReplayPlan:
    """The events of one replay and the weight versions its checkpoints keep.

    A class so that the replay asks two questions (what happens after step i; release
    what the checkpoint after step i kept) without knowing how either was planned:
    ``events`` as :func:`plan_events` gives them, ``reserved`` as
    :func:`checkpoint_reservations` gives them (empty without checkpoints)."""

    def __init__(self, steps: Sequence[Action], sched: Schedule, *, bpe: int, total: int, epochs: bool,
                 checkpoints: bool, checkpoint_every: int) -> None:
        self.events = plan_events(steps, units=sched.stages * sched.workers, bpe=bpe, total=total,
                                  epochs=epochs, checkpoints=checkpoints, checkpoint_every=checkpoint_every)
        self.reserved: dict[int, list[Reservation]] = (
            checkpoint_reservations(steps, self.events, sched) if checkpoints else {})

    def reserve(self, runtimes: Mapping[tuple[int, int], StageRuntime]) -> None:
        """Keep every reserved version in its (worker, stage) runtime's stash."""
        for items in self.reserved.values():
            for w, s, v in items:
                runtimes[(w, s)].reserve(v)

    def release(self, index: int, runtimes: Mapping[tuple[int, int], StageRuntime]) -> None:
        """Release the versions reserved for the checkpoint after replay step ``index`` (once
        it is written, or once a resume from it has rebuilt the in-flight graphs)."""
        for w, s, v in self.reserved.get(index, ()):
            runtimes[(w, s)].release(v)
