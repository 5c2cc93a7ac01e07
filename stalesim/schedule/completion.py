"""When a runtime may stop holding a sent message: a fact of the IR, not of timing.

A non-blocking send keeps its tensor alive until the transport reports it done,
and gloo reports a send done only when it is waited on. Waiting too early
blocks the sender; never waiting keeps every sent tensor until the end of the
run. This pass gives, for every send, the point of its own device's list after
which waiting on it returns at once:

* **confirmed**: the first later receive from the same peer whose send comes,
  in the peer's list, after the peer's receive of this message. The peer waited
  on our message before sending that one, so once it has arrived our send is
  complete (at most a few microseconds of completion bookkeeping remain).
* otherwise (the peer never answers, as with local-update stages, or only much
  later): ``lag`` actions after the send, but never before the point where the
  peer posts the matching receive (its :class:`~stalesim.schedule.comm.PostingPlan`)
  without needing anything this device does later (a dependency closure over the
  dry-run order), so the wait cannot deadlock; at worst it waits for the transfer
  itself. :func:`stalesim.schedule.comm_check.check_comm_order` re-checks these
  waits under NCCL's rendezvous semantics.

The executor waits exactly there (``stalesim.executor.rank``), and the memory model
(:func:`stalesim.schedule.liveness.memory_series`) counts a sent message until
exactly there, so both hold the same bytes at every sample.
"""

from __future__ import annotations

from bisect import bisect_right

from stalesim.schedule.actions import Kind
from stalesim.schedule.comm import PostingPlan, posting_plan
from stalesim.schedule.deps import dependencies, peer
from stalesim.schedule.dryrun import dry_run
from stalesim.schedule.ir import Schedule

_RECV = (Kind.RECV_F, Kind.RECV_B)
_SEND = (Kind.SEND_F, Kind.SEND_B)


def send_release(sched: Schedule, *, recv_ahead: int | None = None, plan: PostingPlan | None = None,
                 lag: int | None = None) -> list[dict[int, int]]:
    """Per device: {index of a SEND: index of the own action after which to wait on it}.

    ``plan``: when the peer posts its receives (default: :func:`posting_plan` with
    ``recv_ahead``, the receives a runtime keeps posted); ``lag``: actions after an
    unconfirmed send before it is waited on (default ``2 * recv_ahead``). An index
    past the end of the list means "at the end".
    """
    if plan is None:
        if recv_ahead is None:
            raise ValueError("send_release: give recv_ahead or plan")
        plan = posting_plan(sched, recv_ahead=recv_ahead)
    lag = 2 * max(1, plan.recv_ahead) if lag is None else lag
    lists = sched.device_actions
    n_dev = len(lists)
    pos = {a.key: (d, i) for d, acts in enumerate(lists) for i, a in enumerate(acts)}
    closure = _dependency_closure(sched, n_dev)
    out: list[dict[int, int]] = []
    for d, acts in enumerate(lists):
        rel: dict[int, int] = {}
        # own receives from each peer, in list order, with the index of their send there
        answers: dict[int, tuple[list[int], list[int]]] = {}
        for j, a in enumerate(acts):
            if a.kind in _RECV:
                pk = peer(a)
                if pk is not None and pk in pos:
                    p, s_j = pos[pk]
                    js, sends = answers.setdefault(p, ([], []))
                    js.append(j)
                    sends.append(s_j)
        for i, a in enumerate(acts):
            if a.kind not in _SEND:
                continue
            pk = peer(a)
            if pk is None or pk not in pos:
                rel[i] = len(acts)
                continue
            p, r = pos[pk]
            confirm = _first_answer(answers.get(p), i, r)
            if confirm is not None:
                rel[i] = confirm
                continue
            post = plan.post_at[p][r]  # the peer posts it right before its action `post`
            safe = -1 if post == 0 else closure[(p, post - 1)][d]
            rel[i] = min(len(acts), max(safe, i + lag))
        out.append(rel)
    return out


def _first_answer(answers: tuple[list[int], list[int]] | None, i: int, r: int) -> int | None:
    """The first own receive after index ``i`` whose send comes after the peer's index ``r``.

    The receives are in list order, so the search starts past ``i`` by bisection; the few
    receives skipped after it are messages that crossed ours on the wire (the peer sent them
    before it received ours), at most the pipeline's depth of them."""
    if answers is None:
        return None
    js, sends = answers
    for k in range(bisect_right(js, i), len(js)):
        if sends[k] > r:
            return js[k]
    return None


def _dependency_closure(sched: Schedule, n_dev: int) -> dict[tuple[int, int], tuple[int, ...]]:
    """(device, index) -> per device, the last index of that device's list the action
    transitively depends on (-1: none), through data dependencies and list order."""
    lists = sched.device_actions
    pos = {a.key: (d, i) for d, acts in enumerate(lists) for i, a in enumerate(acts)}
    ars: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for d, acts in enumerate(lists):
        for i, a in enumerate(acts):
            if a.kind is Kind.AR:
                ars.setdefault((a.stage, a.batch), []).append((d, i))
    vec: dict[tuple[int, int], tuple[int, ...]] = {}
    for step in dry_run(sched):
        d, i, a = step.device, step.index, step.action
        v = vec[(d, i - 1)] if i > 0 else (-1,) * n_dev
        for dep in dependencies(sched, a):
            if dep and dep[0] == "ARDONE":
                srcs = ars.get((dep[1], dep[2]), [])
            else:
                srcs = [pos[dep]] if dep in pos else []
            for src in srcs:
                v = tuple(map(max, v, vec[src]))
        vec[(d, i)] = v[:d] + (max(v[d], i),) + v[d + 1:]
    return vec
