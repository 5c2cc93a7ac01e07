"""Communicators and the receive-posting plan: NCCL's ordering rules as facts of the IR.

NCCL matches point-to-point messages by *order*, not by tag: on one communicator
the k-th send from A to B meets the k-th receive B posted from A, and each op
only runs when it reaches the head of its stream's queue, where it waits for its
peer's op (a rendezvous, no buffering). torch's ProcessGroupNCCL keeps one such
communicator and stream per unordered rank pair of a process group
(``getKeySendRecv``: ``"low:high"``), so both directions of a pair share one
FIFO. Two rules make that order harmless, and this module defines both once for
every consumer (the executor, the memory model, the release pass, the checker):

* **one communicator per directed edge and channel** (:func:`edges`): a process
  group per (sender device -> receiver device, ``act`` or ``grad``) that the
  lowered schedule uses. On each group one rank only sends and the other only
  receives, so a receive can never sit in front of one of its own rank's sends.
* **receives posted in the sender's order** (:func:`posting_plan`): on an edge,
  the receiver posts its receives in the order the sender sends them, so the
  k-th send meets the k-th receive. Up to ``recv_ahead`` receives are kept
  posted ahead of the action that consumes them; a receive needed now forces
  every receive before it in the posting sequence.

The labels of a batch ride with its first activation (one more message on the
``act`` edge right after it): :func:`label_carriers` says which send/receive
carries them. :mod:`stalesim.schedule.comm_check` simulates the rank programs
under these rules and proves that NCCL would not hang.
"""

from __future__ import annotations

from dataclasses import dataclass

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.deps import peer
from stalesim.schedule.ir import Schedule

ACT = "act"  # activations and the labels that ride with them
GRAD = "grad"  # gradients of stage outputs
RECV_KINDS = (Kind.RECV_F, Kind.RECV_B)
SEND_KINDS = (Kind.SEND_F, Kind.SEND_B)
POSTING_ORDERS = ("sender", "list")


@dataclass(frozen=True, order=True)
class Edge:
    """A directed channel between two devices: one communicator (process group)."""

    src: int
    dst: int
    channel: str  # ACT or GRAD

    def __str__(self) -> str:
        return f"{self.channel} {self.src}->{self.dst}"


def edge_of(sched: Schedule, a: Action) -> Edge:
    """The edge a ``SEND_*``/``RECV_*`` action's message travels on."""
    s, w = a.stage, a.worker
    dev = sched.device_of
    if a.kind is Kind.SEND_F:
        return Edge(dev(s, w), dev(s + 1, w), ACT)
    if a.kind is Kind.RECV_F:
        return Edge(dev(s - 1, w), dev(s, w), ACT)
    if a.kind is Kind.SEND_B:
        return Edge(dev(s, w), dev(s - 1, w), GRAD)
    if a.kind is Kind.RECV_B:
        return Edge(dev(s + 1, w), dev(s, w), GRAD)
    raise ScheduleError(f"edge_of: {a} is not a point-to-point action")


def edges(sched: Schedule) -> list[Edge]:
    """Every edge the schedule sends on, sorted: the same list on every rank, so the
    ranks can create one process group per edge in this order (``new_group`` is
    collective)."""
    out = {edge_of(sched, a) for acts in sched.device_actions for a in acts if a.kind in SEND_KINDS}
    return sorted(out)


def label_carriers(acts: list[Action]) -> set[int]:
    """Indices of the ``SEND_F``/``RECV_F`` of one device's list that carry a batch's
    labels: the first one per (kind, worker, stage, batch) in list order."""
    out: set[int] = set()
    firsts: set[tuple] = set()
    for i, a in enumerate(acts):
        if a.kind is Kind.SEND_F or a.kind is Kind.RECV_F:
            key = (a.kind, a.worker, a.stage, a.batch)
            if key not in firsts:
                firsts.add(key)
                out.add(i)
    return out


@dataclass(frozen=True)
class PostingPlan:
    """When each device posts each of its receives.

    ``before[d]``: {action index i: indices of the ``RECV_*`` actions of device d to post
    right before action i runs, in posting order}; ``post_at[d]``: the inverse, {receive
    index: the i before which it is posted} (always <= the receive's own index).
    """

    recv_ahead: int
    order: str
    before: tuple[dict[int, tuple[int, ...]], ...]
    post_at: tuple[dict[int, int], ...]

    def posted_after(self, device: int, index: int) -> list[int]:
        """Receives posted by the end of action ``index`` and not yet executed: the
        buffers a runtime holds for posted receives right after that action."""
        return sorted(r for r, j in self.post_at[device].items() if j <= index < r)


def sender_positions(sched: Schedule) -> dict[tuple[int, int], int]:
    """(device, index of a RECV_*) -> index of its SEND_* in the sender's list."""
    pos = {a.key: i for acts in sched.device_actions for i, a in enumerate(acts) if a.kind in SEND_KINDS}
    out: dict[tuple[int, int], int] = {}
    for d, acts in enumerate(sched.device_actions):
        for i, a in enumerate(acts):
            if a.kind in RECV_KINDS:
                pk = peer(a)
                if pk not in pos:
                    raise ScheduleError(f"posting plan: {a} on device {d} has no matching send")
                out[(d, i)] = pos[pk]
    return out


def posting_sequence(sched: Schedule, device: int, *, order: str = "sender",
                     spos: dict[tuple[int, int], int] | None = None) -> list[int]:
    """The order in which ``device`` posts its receives.

    ``sender``: walk the receives in list order; before each, every receive of its edge
    that the sender sends earlier (so each edge's receives are posted in the sender's
    order, whatever the list order). ``list``: the device's own list order (what the
    executor did before per-edge groups; kept to show that the checks catch it).
    """
    if order not in POSTING_ORDERS:
        raise ScheduleError(f"posting order: expected one of {', '.join(POSTING_ORDERS)}, got {order!r}")
    acts = sched.device_actions[device]
    recvs = [i for i, a in enumerate(acts) if a.kind in RECV_KINDS]
    if order == "list":
        return recvs
    if spos is None:  # a caller walking every device passes it once (it spans all devices)
        spos = sender_positions(sched)
    queues: dict[Edge, list[int]] = {}
    for i in recvs:
        queues.setdefault(edge_of(sched, acts[i]), []).append(i)
    heads = {e: sorted(q, key=lambda i: spos[(device, i)]) for e, q in queues.items()}
    nxt = dict.fromkeys(heads, 0)
    posted: set[int] = set()
    seq: list[int] = []
    for i in recvs:
        e = edge_of(sched, acts[i])
        q = heads[e]
        while i not in posted:
            r = q[nxt[e]]
            nxt[e] += 1
            posted.add(r)
            seq.append(r)
    return seq


def posting_plan(sched: Schedule, *, recv_ahead: int, order: str = "sender") -> PostingPlan:
    """Per device, which receives to post before each action.

    Before action i the device posts the next receives of :func:`posting_sequence`
    until (a) the receive action i itself (if it is one) is posted (a forced post:
    everything before it in the sequence goes first), and (b) ``recv_ahead`` posted
    receives are waiting for their ``RECV_*`` action (i or later). With a sequence in
    list order this is exactly "keep the next ``recv_ahead`` receives of the list
    posted, topped up after every receive".
    """
    if recv_ahead < 0:
        raise ScheduleError(f"recv_ahead: must be >= 0, got {recv_ahead}")
    before: list[dict[int, tuple[int, ...]]] = []
    post_at: list[dict[int, int]] = []
    spos = sender_positions(sched) if order == "sender" else None
    for d, acts in enumerate(sched.device_actions):
        seq = posting_sequence(sched, d, order=order, spos=spos)
        at: dict[int, int] = {}
        plan: dict[int, tuple[int, ...]] = {}
        p = 0
        waiting = 0  # posted receives whose RECV action is at or after the current one
        for i, a in enumerate(acts):
            now: list[int] = []
            if a.kind in RECV_KINDS:
                while i not in at:
                    r = seq[p]
                    p += 1
                    at[r] = i
                    now.append(r)
                    waiting += 1
            while waiting < recv_ahead and p < len(seq):
                r = seq[p]
                p += 1
                at[r] = i
                now.append(r)
                waiting += 1
            if now:
                plan[i] = tuple(now)
            if a.kind in RECV_KINDS:
                waiting -= 1
        before.append(plan)
        post_at.append(at)
    return PostingPlan(recv_ahead, order, tuple(before), tuple(post_at))


def receive_order_matches_send_order(sched: Schedule) -> bool:
    """Whether every device executes each edge's receives in the sender's order (then the
    ``sender`` posting sequence equals the list order, and nothing changes for it)."""
    spos = sender_positions(sched)
    for d, acts in enumerate(sched.device_actions):
        last: dict[Edge, int] = {}
        for i, a in enumerate(acts):
            if a.kind in RECV_KINDS:
                e = edge_of(sched, a)
                if spos[(d, i)] < last.get(e, -1):
                    return False
                last[e] = spos[(d, i)]
    return True
