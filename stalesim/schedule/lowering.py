"""Lowering pass: insert the point-to-point sends and receives between devices.

Where consecutive stages live on different devices, the producer gets a
``SEND_F`` right after its forward (``SEND_B`` after its backward) and the
consumer a ``RECV_F`` right before its forward (``RECV_B`` before its
backward). A split backward receives and sends around its ``I`` (the input
gradient); its ``W`` needs nothing from another device. Stages of one device
(virtual stages placed on the same device, the turn of a V shape, folding)
hand over in memory, without a send. Receives are placed late (just in time); an executor may post them
earlier, since it knows the whole list. Local-update schedules send no
gradients: no gradient crosses a stage.
"""

from __future__ import annotations

from dataclasses import replace

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.ir import Schedule


def lower(sched: Schedule) -> Schedule:
    """Return a copy of ``sched`` with sends/receives added (idempotent)."""
    if sched.lowered:
        return sched
    S = sched.stages
    dev = sched.device_of
    new_lists: list[list[Action]] = []
    for acts in sched.device_actions:
        out: list[Action] = []
        for a in acts:
            s, t, m, r = a.stage, a.batch, a.micro, a.worker
            if a.kind is Kind.F:
                if s > 0 and dev(s - 1, r) != dev(s, r):
                    out.append(act(Kind.RECV_F, s, t, m, r))
                out.append(a)
                if s < S - 1 and dev(s + 1, r) != dev(s, r):
                    out.append(act(Kind.SEND_F, s, t, m, r))
            elif a.kind is Kind.B or a.kind is Kind.I:  # W sends and receives nothing
                needs_grad = not sched.has_loss(s)
                if needs_grad and dev(s + 1, r) != dev(s, r):
                    out.append(act(Kind.RECV_B, s, t, m, r))
                out.append(a)
                if s > 0 and not sched.local_loss and dev(s - 1, r) != dev(s, r):
                    out.append(act(Kind.SEND_B, s, t, m, r))
            else:
                out.append(a)
        new_lists.append(out)
    return replace(sched, device_actions=new_lists, lowered=True)
