"""The cost model ``validate`` predicts with: profile + measured overheads + contention.

This module is the model (pure functions of measured inputs);
:mod:`stalesim.validate.corunners` takes the measurements (profiles with
co-runners, per-action overhead). The simulator consumes per-stage costs (:class:`~stalesim.sim.model.StageCosts`).
A plain per-layer profile describes one process alone on the machine, calling
blocks directly. The ranks of a real run differ in two general ways, each
measured here once per machine and model rather than fitted per schedule:

* **Per-action runtime overhead** (``overhead_s[kind]``): a rank runs every
  F/LOSS/B/U through :class:`~stalesim.runtime.stage.StageRuntime` (saved-tensor
  hooks, version bookkeeping, a per-batch gradient buffer, ``autograd.grad``)
  and the executor's dispatcher (timestamps, beacon, memory tracking). Measured
  by :func:`stalesim.validate.corunners.measure_overhead` as the time of each
  action on a tiny stage through the runtime minus the same arithmetic called
  directly; added to every action.
* **Dispatch gap** (``dispatch_s``): the executor's loop spends time between
  two actions (bookkeeping, posting receives, memory tracking) on every action,
  communication actions included; measured as the median gap between
  consecutive actions of the 1-rank run and charged per dispatched action
  (:func:`dispatch_counts`).
* **Contention between ranks** on one CPU socket (shared memory bandwidth and
  caches, SMT siblings, the gloo threads): the profile is measured a second time
  while N-1 co-runner processes train the same model with the same thread count
  (:func:`stalesim.validate.corunners.contended_profile`). A stage's cost is the interpolation
  ``(1 - phi) * alone + phi * contended`` where ``phi`` is the fraction of that
  device's busy time during which the other devices are busy too, read from the
  simulated timeline itself (:func:`busy_overlap`) and iterated to a fixed point
  (:func:`simulate_with_costs`). A sequential schedule (ranks never overlap)
  thus gets the alone costs and a full pipeline the contended ones, with no
  per-schedule factor anywhere.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.model import SimHardware, StageCosts
    from stalesim.sim.result import SimResult
    from stalesim.workloads.profile import Profile

KINDS = ("F", "B", "U", "LOSS", "I", "W")  # I, W: the halves of a split backward


@dataclass
class CostModel:
    """Everything needed to turn a schedule into per-stage simulator costs."""

    profile: Profile  # one rank alone, the ranks' thread count and device
    contended: Profile | None = None  # the same with the other ranks busy (CPU ranks)
    overhead_s: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in KINDS})
    notes: list[str] = field(default_factory=list)
    dispatch_s: float = 0.0  # executor loop time between two consecutive actions of a rank

    def contention_ratio(self, batch_size: int | None = None) -> float | None:
        """Sum of per-layer compute (F+B+U), contended over alone, at ``batch_size``."""
        if self.contended is None:
            return None
        b = batch_size or self.profile.batch_size
        a = sum(lp.compute_s for lp in self.profile.at_batch_size(b).layers)
        c = sum(lp.compute_s for lp in self.contended.at_batch_size(b).layers)
        return c / a if a > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"overhead_s": dict(self.overhead_s), "dispatch_s": self.dispatch_s,
                "contention_ratio": self.contention_ratio(),
                "has_contended_profile": self.contended is not None,
                "notes": list(self.notes)}


# ----------------------------------------------------------------- stage costs
def dispatch_counts(sched: Any) -> dict[tuple[str, int], float]:
    """Per (kind, stage) of compute actions: actions the rank dispatches per such action.

    Every action (also SEND/RECV/AR/ARW, which the simulator gives no core time)
    costs the executor loop one dispatch gap; a communication action's gap is
    charged to the compute action before it on the same device (or the next one
    at the start of a list). Derived from the lowered IR, so it holds for any
    schedule.
    """
    from collections import Counter

    comp: Counter = Counter()
    attached: Counter = Counter()
    for acts in sched.device_actions:
        last = None
        pending = 0
        for a in acts:
            k = a.kind.value
            if k in KINDS:
                key = (k, a.stage)
                comp[key] += 1
                attached[key] += pending
                pending = 0
                last = key
            elif last is None:
                pending += 1
            else:
                attached[last] += 1
    return {key: 1.0 + attached[key] / n for key, n in comp.items()}


def stage_costs_for(cm: CostModel, cuts: list[int], ppv: list[int], *, batch_size: int,
                    action_batch: int, phi: list[float] | None = None,
                    dispatch: dict[tuple[str, int], float] | None = None) -> StageCosts:
    """Per-stage costs: alone/contended interpolation by ``phi[s]``, plus per-action
    overhead, plus ``cm.dispatch_s`` x ``dispatch[(kind, stage)]`` (see :func:`dispatch_counts`)."""
    from stalesim.sim.model import stage_costs, to_ns

    alone = stage_costs(cm.profile, cuts, batch_size=batch_size, action_batch=action_batch, ppv=ppv)
    S = alone.stages
    phi = list(phi) if phi is not None else [0.0] * S
    if cm.contended is not None and any(p > 0 for p in phi):
        busy = stage_costs(cm.contended, cuts, batch_size=batch_size, action_batch=action_batch, ppv=ppv)

        def mix(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
            # co-runners never make a rank faster: a contended cost below the alone one is
            # measurement noise, and using it made busy configurations cheaper per sample than
            # the one-device baseline (2.02x on 2 devices in `make demo`); floor it at alone
            return tuple(round((1 - phi[s]) * a[s] + phi[s] * max(a[s], b[s])) for s in range(S))

        f, b_, u = mix(alone.f_ns, busy.f_ns), mix(alone.b_ns, busy.b_ns), mix(alone.u_ns, busy.u_ns)
        bi = mix(alone.split_ns()[0], busy.split_ns()[0])
        bw = mix(alone.split_ns()[1], busy.split_ns()[1])
    else:
        f, b_, u = alone.f_ns, alone.b_ns, alone.u_ns
        bi, bw = alone.split_ns()
    # a split backward's halves are dispatched like a backward: B's overhead each unless measured
    o = {k: cm.overhead_s.get(k, cm.overhead_s.get("B", 0.0) if k in ("I", "W") else 0.0)
         for k in KINDS}
    dc = dispatch or {}

    def extra(kind: str, s: int) -> int:
        return to_ns(o[kind] + cm.dispatch_s * dc.get((kind, s), 1.0))

    # the profile's last block includes the loss arithmetic; the LOSS action adds its overhead
    loss_extra = max((extra("LOSS", s) for s in range(S) if ("LOSS", s) in dc), default=extra("LOSS", S - 1))
    return replace(alone, f_ns=tuple(x + extra("F", s) for s, x in enumerate(f)),
                   b_ns=tuple(x + extra("B", s) for s, x in enumerate(b_)),
                   u_ns=tuple(x + extra("U", s) for s, x in enumerate(u)),
                   bi_ns=tuple(x + extra("I", s) for s, x in enumerate(bi)),
                   bw_ns=tuple(x + extra("W", s) for s, x in enumerate(bw)),
                   loss_ns=alone.loss_ns + loss_extra)


def busy_overlap(result: SimResult) -> list[float]:
    """Per device: mean number of *other* devices computing while it computes, / (n-1).

    Read from the simulated timeline inside its steady window (1.0: the others
    are always busy when this one is; 0.0: they never overlap).
    """
    tl = result.timeline
    if tl is None:
        raise ValueError("busy_overlap: needs an event-simulation result")
    prog = tl.program
    n = result.devices
    if n <= 1:
        return [0.0] * n
    lo, hi = _window_ns(result)
    ivs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for gid, a in enumerate(prog.actions):
        if a.kind.value in KINDS:
            s0, e0 = max(tl.start[gid], lo), min(tl.end[gid], hi)
            if e0 > s0:
                ivs[prog.device_of_gid[gid]].append((s0, e0))
    for d, s0, e0, _ in tl.cpu_jobs:
        s0, e0 = max(s0, lo), min(e0, hi)
        if e0 > s0:
            ivs[d].append((s0, e0))
    # sweep: +1/-1 events per device
    events: list[tuple[int, int, int]] = []
    for d, lst in enumerate(ivs):
        for s0, e0 in lst:
            events.append((s0, 1, d))
            events.append((e0, -1, d))
    events.sort(key=lambda x: (x[0], x[1]))
    depth = [0] * n
    busy_t = [0] * n
    weighted = [0.0] * n
    prev = events[0][0] if events else 0
    for t, delta, d in events:
        if t > prev:
            active = [i for i in range(n) if depth[i] > 0]
            k = len(active)
            for i in active:
                busy_t[i] += t - prev
                weighted[i] += (t - prev) * (k - 1)
            prev = t
        depth[d] += delta
    return [weighted[i] / busy_t[i] / (n - 1) if busy_t[i] else 0.0 for i in range(n)]


def _window_ns(result: SimResult) -> tuple[int, int]:
    from stalesim.sim.model import NS

    tl = result.timeline
    w = result.steady_window
    if not w or w[1] <= w[0]:
        return 0, tl.makespan
    done = tl.batch_done
    lo, hi = done[w[0]], done[w[1]]
    return (lo, hi) if hi > lo else (0, int(result.makespan_s * NS))


def stage_phi(sched: Any, overlap: list[float]) -> list[float]:
    """Device overlaps -> per-stage interpolation weights (stage s lives on device s,
    or every stage on every worker for data-parallel schedules)."""
    stages = sched.stages
    if not overlap:
        return [0.0] * stages
    if sched.data_parallel or len(overlap) != stages:
        m = sum(overlap) / len(overlap)
        return [m] * stages
    return list(overlap)


def simulate_with_costs(cm: CostModel, hw: SimHardware, cfg: Any, *, ppv: list[int] | None,
                        batch_size: int, rounds: int = 4, tol: float = 0.002) -> tuple[SimResult, dict]:
    """Event-simulate the schedule of ``cfg`` (a ScheduleConfig, built once through the IR)
    with the cost model; contention by fixed-point iteration.

    Returns the result and ``{"phi": per-stage weights, "rounds": n, "history": [...]}``.
    """
    from stalesim.schedule import build_schedule
    from stalesim.sim import simulate
    from stalesim.sim.model import resolve_cuts

    sched = build_schedule(cfg)
    S = sched.stages
    ab = sched.action_batch_size(batch_size)
    cuts, ppv_used = resolve_cuts(cm.profile, S, ppv if S > 1 else None, batch_size)
    phi = [0.0] * S
    history: list[float] = []
    result = None
    dispatch = dispatch_counts(sched) if cm.dispatch_s > 0 else None
    for r in range(max(1, rounds)):
        costs = stage_costs_for(cm, cuts, ppv_used, batch_size=batch_size, action_batch=ab, phi=phi,
                                dispatch=dispatch)
        result = simulate(costs, sched, hw)
        history.append(result.iteration_time_s)
        if cm.contended is None or result.devices <= 1:
            break
        new_phi = stage_phi(sched, busy_overlap(result))
        if r > 0 and len(history) >= 2 and abs(history[-1] - history[-2]) <= tol * history[-2]:
            break
        phi = new_phi
    assert result is not None
    return result, {"phi": phi, "rounds": len(history), "history": history,
                    "cuts": list(cuts), "ppv": list(ppv_used), "action_batch": ab, "costs": costs,
                    "schedule": sched}


def replay_costs(costs: StageCosts, rows_by_rank: dict[str, list[list[Any]]],
                 window_s: tuple[float, float] | None = None) -> StageCosts:
    """The same stage costs with F/B/U/LOSS replaced by the *measured* median durations.

    Simulating a schedule with these isolates the simulator's schedule and
    communication model from the compute-cost model: if the replay matches the
    measured iteration time, a prediction error comes from the costs (profile,
    overhead, contention, machine load), not from how the schedule is played.
    Only actions inside ``window_s`` (the steady state) are used when given.
    """
    from stalesim.sim.model import to_ns

    S = costs.stages
    durs: dict[tuple[str, int], list[float]] = {}
    for rows in rows_by_rank.values():
        for _label, kind, stage, _b, _m, _w, t0, t1 in rows:
            if kind not in KINDS:
                continue
            if window_s is not None and (t1 < window_s[0] or t0 > window_s[1]):
                continue
            durs.setdefault((kind, int(stage)), []).append(t1 - t0)

    def med(kind: str, s: int, fallback: int) -> int:
        v = durs.get((kind, s))
        return to_ns(statistics.median(v)) if v else fallback

    losses = [x for (k, _s), v in durs.items() if k == "LOSS" for x in v]
    bi, bw = costs.split_ns()
    return replace(costs,
                   f_ns=tuple(med("F", s, costs.f_ns[s]) for s in range(S)),
                   b_ns=tuple(med("B", s, costs.b_ns[s]) for s in range(S)),
                   bi_ns=tuple(med("I", s, bi[s]) for s in range(S)),
                   bw_ns=tuple(med("W", s, bw[s]) for s in range(S)),
                   u_ns=tuple(med("U", s, costs.u_ns[s]) for s in range(S)),
                   loss_ns=to_ns(statistics.median(losses)) if losses else costs.loss_ns)


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
