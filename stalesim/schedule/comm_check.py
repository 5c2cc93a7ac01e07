"""Would NCCL hang? The rank programs simulated under NCCL's matching rules, on the CPU.

The unit-time dry run (:mod:`stalesim.schedule.dryrun`) proves a schedule free of
deadlock when sends are buffered. NCCL does not buffer: this check replays what
each rank *issues*, in the executor's order, under NCCL's semantics:

* per rank and communicator one FIFO of operations in issue order; a
  communicator is a (process group, rank pair) for point-to-point, as torch's
  ProcessGroupNCCL keys them (``getKeySendRecv``), and the group itself for
  collectives;
* a point-to-point op completes only when it and its peer's op are both at the
  heads of their FIFOs (rendezvous); the two must describe the same message,
  else NCCL would silently pair the wrong tensors (:class:`CommOrderError`);
* an all-reduce completes when every member has it at the head;
* a rank blocks only where the executor blocks (the stream waits on GPU): the
  ``RECV_*`` action on its receive(s), ``ARW`` on its all-reduce, the send
  releases of :func:`stalesim.schedule.completion.send_release` and the final
  flush. Everything else it issues and moves on.

A rank's issue order is its action list with the receives of the
:class:`~stalesim.schedule.comm.PostingPlan` posted right before the action the
plan names; a ``SEND_F`` that carries labels issues the activation, then the
labels. The executor follows exactly this program (``stalesim.executor.rank``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Kind
from stalesim.schedule.comm import RECV_KINDS, SEND_KINDS, Edge, PostingPlan, edge_of, label_carriers
from stalesim.schedule.deps import peer
from stalesim.schedule.ir import Schedule

GroupOf = Callable[[Edge], Hashable]
COLLECTIVE_GROUP = "world"  # the all-reduce's group: the default process group


def edge_group(e: Edge) -> Hashable:
    """The executor's layout: one process group per directed edge and channel."""
    return e


class CommOrderError(ScheduleError):
    """NCCL would hang (``stuck``: per blocked rank, a line) or pair the wrong messages."""

    def __init__(self, message: str, stuck: dict[int, str] | None = None):
        super().__init__(message)
        self.stuck = stuck or {}


@dataclass
class _Op:
    rank: int
    what: str  # "send" | "recv" | "coll"
    message: tuple  # identity both sides must agree on
    label: str  # for diagnoses
    queue: Hashable
    peer: int | None = None
    done: bool = False


@dataclass
class _Rank:
    # (step, ops, action index): "issue" enqueues the ops, "wait" blocks until they are done
    program: list[tuple[str, list[_Op], int]] = field(default_factory=list)
    pc: int = 0  # the next step


def _message(sched: Schedule, d: int, i: int, part: str) -> tuple:
    """What a send of device d's action i (or the receive matching it) carries."""
    a = sched.device_actions[d][i]
    src_key = a.key if a.kind in SEND_KINDS else peer(a)
    return (part, src_key)


def check_comm_order(sched: Schedule, plan: PostingPlan, group_of: GroupOf = edge_group, *,
                     release: list[dict[int, int]] | None = None) -> None:
    """Raise :class:`CommOrderError` naming the stuck ranks if NCCL would hang.

    ``plan``: when each rank posts its receives; ``group_of``: the process group of an
    edge's messages (default: :func:`edge_group`); ``release``: per device, {send index:
    index after which it is waited on} (default: :func:`send_release` with the plan).
    """
    from stalesim.schedule.completion import send_release

    n = len(sched.device_actions)
    if release is None:
        release = send_release(sched, plan=plan)

    def p2p_queue(e: Edge) -> Hashable:  # torch's communicator key: the group and the rank pair
        return (group_of(e), min(e.src, e.dst), max(e.src, e.dst))

    ranks = [_Rank(_rank_program(sched, d, plan.before[d], release[d], p2p_queue)) for d in range(n)]
    queues: dict[tuple[Hashable, int], deque[_Op]] = {}
    while True:
        moved = False
        for d in range(n):
            moved |= _advance(ranks[d], d, queues)
        moved |= _match(sched, queues, n)
        if not moved:
            break
    stuck = {d: _diagnose(sched, d, ranks[d], queues) for d in range(n)
             if ranks[d].pc < len(ranks[d].program)}
    if stuck:
        raise CommOrderError(f"schedule '{sched.name}' hangs under NCCL's ordering: "
                             + "; ".join(stuck.values()), stuck)


_Step = tuple[str, list[_Op], int]


def _rank_program(sched: Schedule, d: int, posts: dict[int, tuple[int, ...]], release: dict[int, int],
                  queue_of: Callable[[Edge], Hashable]) -> list[_Step]:
    """What rank d issues and where it blocks, in the executor's order (module doc):
    ``posts``: the receives posted before each action; ``release``: send index -> index
    after which it is waited on; ``queue_of``: an edge's communicator."""
    acts = sched.device_actions[d]
    prog: list[_Step] = []
    carriers = label_carriers(acts)
    recv_ops: dict[int, list[_Op]] = {}
    send_ops: dict[int, list[_Op]] = {}
    ar_ops: dict[tuple, _Op] = {}
    releases: dict[int, list[int]] = {}
    for s_i, j in release.items():
        releases.setdefault(j, []).append(s_i)
    for i, a in enumerate(acts):
        for r in posts.get(i, ()):
            recv_ops[r] = ops = _p2p_ops(sched, d, r, r in carriers, queue_of)
            prog += [("issue", [op], i) for op in ops]
        k = a.kind
        if k in SEND_KINDS:
            send_ops[i] = ops = _p2p_ops(sched, d, i, i in carriers, queue_of)
            prog += [("issue", [op], i) for op in ops]
        elif k in RECV_KINDS:
            prog.append(("wait", recv_ops.pop(i), i))
        elif k is Kind.AR:
            op = _Op(d, "coll", ("AR", a.stage, a.batch), f"all-reduce {a}", (COLLECTIVE_GROUP, -1))
            ar_ops[(a.worker, a.stage, a.batch)] = op
            prog.append(("issue", [op], i))
        elif k is Kind.ARW:
            prog.append(("wait", [ar_ops.pop((a.worker, a.stage, a.batch))], i))
        for s_i in releases.get(i, ()):
            prog.append(("wait", send_ops.pop(s_i), i))
    prog.append(("wait", [op for ops in send_ops.values() for op in ops], len(acts)))
    return prog


def _p2p_ops(sched: Schedule, d: int, i: int, labels: bool, queue_of: Callable[[Edge], Hashable]) -> list[_Op]:
    """The operations of device d's send or receive action i: the data, then the labels
    when the message carries them."""
    a = sched.device_actions[d][i]
    e = edge_of(sched, a)
    parts = ["data"] + (["labels"] if labels else [])
    if a.kind in SEND_KINDS:
        return [_Op(d, "send", _message(sched, d, i, p), f"send of {p} of {a}", queue_of(e), e.dst)
                for p in parts]
    return [_Op(d, "recv", _message(sched, d, i, p), f"receive of {p} for {a}", queue_of(e), e.src)
            for p in parts]


def _advance(rk: _Rank, d: int, queues: dict[tuple[Hashable, int], deque[_Op]]) -> bool:
    """Run rank d's program until it blocks on an operation not yet done; True if it moved."""
    moved = False
    while rk.pc < len(rk.program):
        step, ops, _ = rk.program[rk.pc]
        if step == "issue":
            for op in ops:
                queues.setdefault((op.queue, d), deque()).append(op)
        elif not all(op.done for op in ops):
            break
        rk.pc += 1
        moved = True
    return moved


def _match(sched: Schedule, queues: dict[tuple[Hashable, int], deque[_Op]], n: int) -> bool:
    """Complete every operation at the heads of its queues that NCCL would; True if any did.
    (Point-to-point pairs are matched here, in the loop: they are most of the operations.)"""
    moved = False
    for (qk, d), q in list(queues.items()):
        while q:
            op = q[0]
            if op.what == "coll":
                if not _complete_collective(sched, queues, qk, n):
                    break
                moved = True
                continue
            assert op.peer is not None
            other = queues.get((qk, op.peer))
            if not other:
                break
            mate = other[0]
            if op.what == mate.what or mate.peer != d:
                break  # both send, both receive: neither can complete (a hang)
            if op.message != mate.message:
                raise CommOrderError(
                    f"schedule '{sched.name}': NCCL would pair the wrong messages: rank {d}'s "
                    f"{op.label} meets rank {op.peer}'s {mate.label}")
            q.popleft().done = True
            other.popleft().done = True
            moved = True
    return moved


def _complete_collective(sched: Schedule, queues: dict[tuple[Hashable, int], deque[_Op]], qk: Hashable,
                         n: int) -> bool:
    """Complete the all-reduce at the heads of every rank's queue ``qk`` once all have it
    there; False while one has not."""
    heads = [queues.get((qk, r)) for r in range(n)]
    if not all(h for h in heads):
        return False
    msgs = {h[0].message for h in heads if h}
    if len(msgs) > 1 or any(h[0].what != "coll" for h in heads if h):
        raise CommOrderError(
            f"schedule '{sched.name}': the all-reduces meet different operations: "
            + "; ".join(f"rank {r}: {h[0].label}" for r, h in enumerate(heads) if h))
    for h in heads:
        if h:
            h.popleft().done = True
    return True


def _diagnose(sched: Schedule, d: int, rk: _Rank, queues: dict) -> str:
    _, payload, i = rk.program[rk.pc]
    acts = sched.device_actions[d]
    at = f"action {i} ({acts[i]})" if i < len(acts) else "the final flush"
    waits = [op for op in payload if not op.done]
    parts = []
    for op in waits[:2]:
        q = queues.get((op.queue, d))
        head = q[0].label if q else "nothing"
        text = f"{op.label}"
        if op.peer is not None:
            other = queues.get((op.queue, op.peer))
            theirs = other[0].label if other else "nothing issued"
            text += f" (head of its queue here: {head}; rank {op.peer}'s head there: {theirs})"
        parts.append(text)
    more = f" and {len(waits) - 2} more" if len(waits) > 2 else ""
    return f"rank {d} stuck at {at} waiting on " + ", ".join(parts) + more
