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

from stalesim.schedule.actions import Kind
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
