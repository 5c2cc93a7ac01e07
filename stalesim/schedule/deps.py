"""Data dependencies of each action: what must have finished before it may start.

This is the single definition of the IR's semantics that the validator, the
dry run and (through them) every consumer rely on. A dependency is an action
key, or a ``("ARDONE", stage, batch)`` token for a completed all-reduce.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.ir import Schedule

DepKey = tuple[Any, ...]


def ardone(stage: int, batch: int) -> DepKey:
    """Token for 'the all-reduce of (stage, batch) has completed on every worker'."""
    return ("ARDONE", stage, batch)


def dependencies(sched: Schedule, a: Action) -> Iterator[DepKey]:
    """Keys that must be done before ``a`` starts (own-device order comes on top).

    Split backward: ``I`` (input gradient) needs what ``B`` needs (its forward and
    the output gradient: the ``LOSS``, the received gradient, or the next stage's
    ``I``/``B`` on the same device); ``W`` (weight gradient) needs only its ``I``
    (which keeps the intermediate gradients W reads). ``U`` and ``AR`` wait for the
    weight gradient of every micro-batch (``W`` where split, else ``B``); ``SEND_B``
    sends what ``I``/``B`` produced.
    """
    k, s, t, m, r = a.kind, a.stage, a.batch, a.micro, a.worker
    same = sched.device_of
    if k is Kind.F:
        if s > 0:
            if sched.lowered and same(s - 1, r) != same(s, r):
                yield (Kind.RECV_F, r, s, t, m)
            else:
                yield (Kind.F, r, s - 1, t, m)
    elif k is Kind.LOSS:
        yield (Kind.F, r, s, t, m)
    elif k is Kind.B or k is Kind.I:
        yield (Kind.F, r, s, t, m)
        if sched.has_loss(s):
            yield (Kind.LOSS, r, s, t, m)
        elif sched.lowered and same(s + 1, r) != same(s, r):
            yield (Kind.RECV_B, r, s, t, m)
        else:
            yield (sched.input_grad_kind(s + 1, t, m, r), r, s + 1, t, m)
    elif k is Kind.W:
        yield (Kind.I, r, s, t, m)
    elif k is Kind.U or k is Kind.AR:
        for mm in sched.micro_indices():
            yield (sched.weight_grad_kind(s, t, mm, r), r, s, t, mm)
        if k is Kind.U and sched.workers > 1:
            yield (Kind.ARW, r, s, t, None)
    elif k is Kind.SEND_F:
        yield (Kind.F, r, s, t, m)
    elif k is Kind.RECV_F:
        yield (Kind.SEND_F, r, s - 1, t, m)
    elif k is Kind.SEND_B:
        yield (sched.input_grad_kind(s, t, m, r), r, s, t, m)
    elif k is Kind.RECV_B:
        yield (Kind.SEND_B, r, s + 1, t, m)
    elif k is Kind.ARW:
        yield (Kind.AR, r, s, t, None)
        yield ardone(s, t)


def peer(a: Action) -> tuple[Kind, int, int, int, int | None] | None:
    """Key of the matching receive/send of a point-to-point action, else None."""
    if a.kind is Kind.SEND_F:
        return (Kind.RECV_F, a.worker, a.stage + 1, a.batch, a.micro)
    if a.kind is Kind.RECV_F:
        return (Kind.SEND_F, a.worker, a.stage - 1, a.batch, a.micro)
    if a.kind is Kind.SEND_B:
        return (Kind.RECV_B, a.worker, a.stage - 1, a.batch, a.micro)
    if a.kind is Kind.RECV_B:
        return (Kind.SEND_B, a.worker, a.stage + 1, a.batch, a.micro)
    return None
