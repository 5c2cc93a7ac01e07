"""Liveness pass: what each (worker, stage) keeps alive as its device walks its list.

Walking each device's list in order, per stage:

* **weight versions kept**: the live weights plus every distinct older version
  a pending backward still needs (``F`` done, ``B`` not yet). Under ``stash`` /
  ``double-buffer`` a backward needs its forward's version (``a.version``);
  under ``latest`` it reads the live weights, so only one version is kept.
  PipeDream gives S - s, 2BW gives 2, every other schedule 1.
* **gradient buffers**: batches whose first ``B`` has run and whose ``U`` has
  not (per-batch buffers). 2BW and Pipe-SGD hold 2.
* **activations in flight**: (micro-)batches with ``F`` done and the backward
  not complete (``B``, or the ``W`` of a split backward: W still reads the
  saved activations). GPipe: M; 1F1B: min(S - s, M); stale: 2(S - 1 - s) + 1;
  PipeDream: S - s; ZB-H1: S on every stage (the zero-bubble paper's "same
  in-flight count as 1F1B's first stage").
* **deferred weight gradients**: (micro-)batches with ``I`` done and ``W`` not:
  each keeps the intermediate gradients its ``W`` will read.
* **point-to-point message kinds** the stage sends or receives, and **all-reduce
  buckets in flight** (``AR`` issued, ``ARW`` not yet).

The memory model (:mod:`stalesim.sim.memory`), the fast path's round-trip bound
and the runtimes' stash bookkeeping read these counts; none of them re-runs a
version counter of its own. ``series`` keeps the per-step values for a peak that
needs simultaneity rather than per-component maxima.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.ir import Schedule
from stalesim.schedule.versions import VersionTable

_P2P = (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B)


@dataclass(frozen=True)
class StageLiveness:
    """Maxima over the run for one (worker, stage), in its device's order."""

    stage: int
    worker: int
    versions_kept: int
    grad_buffers: int
    max_in_flight: int  # (micro-)batches with F done and B not yet
    comm_messages: int  # distinct point-to-point message kinds (one buffer each)
    allreduce_in_flight: int
    deferred_w: int = 0  # (micro-)batches with I done and W not yet
    # (device step index, versions alive, activations in flight, gradient buffers)
    series: tuple[tuple[int, int, int, int], ...] = field(default=(), repr=False, compare=False)


@dataclass
class _State:
    version: int = 0
    pending: dict = field(default_factory=dict)  # (batch, micro) -> version its backward reads
    deferred: dict = field(default_factory=dict)  # (batch, micro) -> version its I read (W pending)
    grads: set = field(default_factory=set)
    msgs: set = field(default_factory=set)
    ar: int = 0
    vmax: int = 1
    gmax: int = 0
    fmax: int = 0
    armax: int = 0
    dmax: int = 0
    series: list = field(default_factory=list)


def stage_liveness(sched: Schedule, *, keep_series: bool = False) -> list[StageLiveness]:
    """Per (worker, stage), in device order (see the module doc)."""
    stash = sched.policy.backward_reads_forward_version
    out: list[StageLiveness] = []
    for acts in sched.device_actions:
        state: dict[tuple[int, int], _State] = {}
        for i, a in enumerate(acts):
            st = state.get((a.worker, a.stage))
            if st is None:
                st = state[(a.worker, a.stage)] = _State()
            k = a.kind
            if k is Kind.F:
                st.pending[(a.batch, a.micro)] = a.version if a.version is not None else st.version
                st.fmax = max(st.fmax, len(st.pending) + len(st.deferred))
            elif k is Kind.B:
                st.grads.add(a.batch)
                st.gmax = max(st.gmax, len(st.grads))
                st.pending.pop((a.batch, a.micro), None)
            elif k is Kind.I:
                v = st.pending.pop((a.batch, a.micro), None)
                st.deferred[(a.batch, a.micro)] = (a.version if a.version is not None
                                                   else st.version if v is None else v)
                st.dmax = max(st.dmax, len(st.deferred))
            elif k is Kind.W:
                st.grads.add(a.batch)
                st.gmax = max(st.gmax, len(st.grads))
                st.deferred.pop((a.batch, a.micro), None)
            elif k is Kind.U:
                st.version += 1
                st.grads.discard(a.batch)
            elif k in _P2P:
                st.msgs.add(k)
            elif k is Kind.AR:
                st.ar += 1
                st.armax = max(st.armax, st.ar)
            elif k is Kind.ARW:
                st.ar -= 1
            alive = 1
            if k in (Kind.F, Kind.U, Kind.I):
                # a deferred W reads the version its I read, whatever the policy
                need = set(st.deferred.values())
                if stash:
                    need |= set(st.pending.values())
                alive = len({st.version} | need)
                st.vmax = max(st.vmax, alive)
            if keep_series and k in (Kind.F, Kind.B, Kind.I, Kind.W, Kind.U):
                st.series.append((i, alive, len(st.pending) + len(st.deferred), len(st.grads)))
        for (w, s), st in sorted(state.items()):
            out.append(StageLiveness(s, w, st.vmax, st.gmax, st.fmax, len(st.msgs), st.armax,
                                     st.dmax, tuple(st.series)))
    return out


def in_flight_per_stage(sched: Schedule) -> list[int]:
    """Largest number of (micro-)batches a stage holds between its F and its B
    (maximum over workers): the items a latency-bound pipeline keeps in flight."""
    out = [0] * sched.stages
    for c in stage_liveness(sched):
        out[c.stage] = max(out[c.stage], c.max_in_flight)
    return out


def backward_reads(table: VersionTable, stage: int, worker: int = 0) -> Counter[int]:
    """How many backwards of (worker, stage) read each weight version: a runtime keeps
    a version only while some of them are still to come (a split backward counts
    once and releases its version at its W)."""
    need: Counter[int] = Counter()
    for (w, s, _t, _m), vb in table.vb.items():
        if w == worker and s == stage:
            need[vb] += 1
    return need


@dataclass(frozen=True)
class MemorySample:
    """What one device holds right after one of its compute actions (the memory
    model and the executor's accounting sample the same points, so predicted and measured
    peaks can be compared to the byte).

    ``stages``: per (worker, stage) on the device, (worker, stage, weight versions alive,
    activations in flight, gradient buffers, all-reduce buckets in flight, deferred
    weight gradients: split backwards whose ``I`` ran and ``W`` not yet);
    ``messages``: message-sized buffers held beside them, as (kind, stage whose output
    the tensor has the size of): receive buffers posted or received and not yet
    consumed (``RECV_F`` of stage s holds stage s-1's output, ``RECV_B`` of stage s the
    gradient of stage s's output), input gradients awaiting or in a send (``SEND_B``)
    and sent activations whose forward record is gone but whose send is not yet
    released (``SEND_F``); ``shared``: one entry s per (micro-)batch whose records on
    stage s and on stage s + 1 are both alive on this device (virtual stages, fold): the
    second one's input *is* the first one's output, one storage counted once;
    ``shared_whole``: the same for the (micro-)batches whose backward has not started on
    either stage (neither ``B`` nor ``I`` ran): the records a runtime that frees after ``I``
    what ``W`` does not read still holds whole.
    """

    step: int
    stages: tuple[tuple[int, int, int, int, int, int, int], ...]
    messages: tuple[tuple[str, int], ...]
    shared: tuple[int, ...] = ()
    shared_whole: tuple[int, ...] = ()


def memory_series(sched: Schedule, *, recv_ahead: int = 1) -> list[list[MemorySample]]:
    """Per device, a :class:`MemorySample` after every F, B, I, W, U and LOSS, in list order.

    A split backward's ``I`` consumes the received gradient and produces the input
    gradient as ``B`` does; its activations stay in flight until its ``W`` (which also
    opens the batch's gradient buffer), and a deferred ``W`` keeps the version its ``I``
    read alive whatever the policy.

    Receives: a runtime posts its receives (each a buffer) when the
    :func:`stalesim.schedule.comm.posting_plan` with ``recv_ahead`` says (up to
    ``recv_ahead`` posted ahead of their ``RECV_*``, each edge's in its sender's
    order), and a received buffer is consumed by the F/B that needs it (from then on
    it is that action's input, counted with the activation). Sends are held until the
    point :func:`stalesim.schedule.completion.send_release` gives for the same plan.
    The executor does exactly this (``stalesim.executor.rank.RECV_AHEAD``).
    """
    from stalesim.schedule.comm import posting_plan
    from stalesim.schedule.completion import send_release

    plan = posting_plan(sched, recv_ahead=max(0, recv_ahead))
    release = send_release(sched, plan=plan)
    return [_device_series(sched, acts, plan.before[d], release[d])
            for d, acts in enumerate(sched.device_actions)]


# the actions after which memory_series samples (the executor measures at the same points)
_SAMPLED = (Kind.F, Kind.B, Kind.I, Kind.W, Kind.U, Kind.LOSS)
_Key = tuple[int, int, int, int | None]  # (worker, stage, batch, micro)


@dataclass
class _Buffers:
    """One device's message-sized buffers as memory_series walks its list."""

    waiting: set[int] = field(default_factory=set)  # receives posted and not yet executed
    received: dict[tuple, tuple[str, int]] = field(default_factory=dict)  # consumer key -> message, until consumed
    grads_out: dict[_Key, int] = field(default_factory=dict)  # input gradients awaiting SEND_B / a local B
    # send index -> (kind, stage whose output it has the size of, key, index after which it is released)
    sent: dict[int, tuple[str, int, _Key, int]] = field(default_factory=dict)


def _device_series(sched: Schedule, acts: list[Action], posts: dict[int, tuple[int, ...]],
                   release: dict[int, int]) -> list[MemorySample]:
    """memory_series for one device: its list walked once (``posts``: the receives posted
    before each action; ``release``: send index -> index after which it is released)."""
    stash = sched.policy.backward_reads_forward_version
    local = sched.local_loss
    state: dict[tuple[int, int], _State] = {}
    for a in acts:
        if (a.worker, a.stage) not in state:
            state[(a.worker, a.stage)] = _State()
    buf = _Buffers()
    samples: list[MemorySample] = []
    for i, a in enumerate(acts):
        buf.waiting.update(posts.get(i, ()))
        _step_state(state[(a.worker, a.stage)], a)
        _step_buffers(buf, a, i, local, release.get(i, len(acts)))
        for j in [j for j, v in buf.sent.items() if v[3] <= i]:  # released after this action
            del buf.sent[j]
        if a.kind in _SAMPLED:
            samples.append(MemorySample(i, _stage_rows(state, stash), _messages(buf, state, acts),
                                        () if local else _shared(state),
                                        () if local else _shared(state, whole=True)))
    return samples


def _step_state(st: _State, a: Action) -> None:
    """Action ``a``'s effect on its (worker, stage)'s versions, activations, gradients, buckets."""
    k = a.kind
    if k is Kind.F:
        st.pending[(a.batch, a.micro)] = a.version if a.version is not None else st.version
    elif k is Kind.B:
        st.grads.add(a.batch)
        st.pending.pop((a.batch, a.micro), None)
    elif k is Kind.I:
        v = st.pending.pop((a.batch, a.micro), None)
        st.deferred[(a.batch, a.micro)] = (a.version if a.version is not None
                                           else st.version if v is None else v)
    elif k is Kind.W:
        st.grads.add(a.batch)
        st.deferred.pop((a.batch, a.micro), None)
    elif k is Kind.U:
        st.version += 1
        st.grads.discard(a.batch)
    elif k is Kind.AR:
        st.ar += 1
    elif k is Kind.ARW:
        st.ar -= 1


def _step_buffers(buf: _Buffers, a: Action, i: int, local: bool, release_at: int) -> None:
    """Action ``a`` (index ``i``) on the device's message buffers: a forward consumes its
    received input, a backward (B or I) its received gradient and the input gradient the
    next stage's backward left here, and leaves its own; receives fill, sends hold until
    ``release_at``."""
    k = a.kind
    key = (a.worker, a.stage, a.batch, a.micro)
    if k is Kind.F:
        buf.received.pop(("F",) + key, None)
    elif k is Kind.B or k is Kind.I:
        buf.received.pop(("B",) + key, None)
        buf.grads_out.pop((a.worker, a.stage + 1, a.batch, a.micro), None)  # consumed here
        if a.stage > 0 and not local:
            buf.grads_out[key] = a.stage - 1
    elif k is Kind.RECV_F or k is Kind.RECV_B:
        buf.waiting.discard(i)
        fwd = k is Kind.RECV_F
        buf.received[("F" if fwd else "B",) + key] = (k.value, a.stage - 1 if fwd else a.stage)
    elif k is Kind.SEND_F:
        buf.sent[i] = ("SEND_F", a.stage, key, release_at)
    elif k is Kind.SEND_B:
        buf.grads_out.pop(key, None)
        buf.sent[i] = ("SEND_B", a.stage - 1, key, release_at)


def _stage_rows(state: dict[tuple[int, int], _State],
                stash: bool) -> tuple[tuple[int, int, int, int, int, int, int], ...]:
    """MemorySample.stages: per (worker, stage) on the device, in order."""
    rows = []
    for (w, s), ss in sorted(state.items()):
        need = {ss.version} | set(ss.deferred.values())
        if stash:
            need |= set(ss.pending.values())
        rows.append((w, s, len(need), len(ss.pending) + len(ss.deferred), len(ss.grads), ss.ar,
                     len(ss.deferred)))
    return tuple(rows)


def _messages(buf: _Buffers, state: dict[tuple[int, int], _State],
              acts: list[Action]) -> tuple[tuple[str, int], ...]:
    """MemorySample.messages: received, posted, outgoing-gradient and held-send buffers."""
    posted = [acts[j] for j in sorted(buf.waiting)]
    msgs = list(buf.received.values()) + [
        (p.kind.value, p.stage - 1 if p.kind is Kind.RECV_F else p.stage) for p in posted]
    msgs += [("SEND_B", s) for s in buf.grads_out.values()]
    for kind, s, (w, ss, t, m), _rel in buf.sent.values():
        sw = state[(w, ss)]
        if kind == "SEND_B" or ((t, m) not in sw.pending and (t, m) not in sw.deferred):
            msgs.append((kind, s))  # a sent activation is extra once its record is gone
    return tuple(msgs)


def _shared(state: dict[tuple[int, int], _State], *, whole: bool = False) -> tuple[int, ...]:
    """MemorySample.shared: one s per (micro-)batch alive on both stage s and s + 1 here
    (``whole``: MemorySample.shared_whole, both still before their backward)."""
    shared: list[int] = []
    for (w, s), ss in state.items():
        nxt = state.get((w, s + 1))
        if nxt is not None:
            if whole:
                both = ss.pending.keys() & nxt.pending.keys()
            else:
                both = (ss.pending.keys() | ss.deferred.keys()) & (nxt.pending.keys() | nxt.deferred.keys())
            shared += [s] * len(both)
    return tuple(shared)


def updates_during_backward_wait(sched: Schedule, stage: int, worker: int = 0) -> bool:
    """True when an update of (worker, stage) runs while one of its forwards awaits its
    backward, in its device's order (which every consumer keeps): then the backward must
    read the weights a forward saved through version tokens (StageRuntime's hooks);
    otherwise autograd's own saved parameters are the version the backward reads."""
    pending = 0
    for a in sched.device_actions[sched.device_of(stage, worker)]:
        if a.stage != stage or a.worker != worker:
            continue
        if a.kind is Kind.F:
            pending += 1
        elif a.kind is Kind.B or a.kind is Kind.W:  # a split backward reads weights until its W
            pending -= 1
        elif a.kind is Kind.U and pending > 0:
            return True
    return False
