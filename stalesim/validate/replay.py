"""The replay: a schedule simulated with one measured run's own costs, spread and link.

If the replay matches the measured iteration time, a prediction error comes from the
predicted costs (:mod:`stalesim.cost`), not from how the simulator plays the schedule; this
module reads those costs from the executor's rows (one clock for all ranks).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stalesim.cost import model
from stalesim.cost.model import KINDS, median_draw
from stalesim.schedule.actions import TRANSFER_NAMES_ORDERED, Kind
from stalesim.sim.jitter import measured_ratio

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from stalesim.sim.jitter import ActionJitter
    from stalesim.sim.model import SimHardware, StageCosts
    from stalesim.sim.result import SimResult


def replay_costs(costs: StageCosts, rows_by_rank: dict[str, list[list[Any]]],
                 window_s: tuple[float, float] | None = None, *, overheads: bool = True) -> StageCosts:
    """The same stage costs with every per-action cost replaced by the *measured* one.

    Compute actions (F/B/I/W/U/LOSS): the mean span per kind and stage. With
    ``overheads`` also what the runtime spends besides them: the mean gap after each action kind per
    stage (``gap_ns``), the mean span of sends and all-reduce starts (posting) and
    the completion cost of receives and all-reduce waits (completing a message that is
    already there, solved from the matched messages: the spans above it are waiting)
    (``comm_ns``). Means, not medians: the measured iteration time is the mean over a
    window, a chain of actions adds their means, and a median leaves out the slow
    instances a pipeline's critical path picks up (with medians the replay of ResNet-32's
    runs was 1-7% faster than the runs it replayed, 0-3% with means).

    Simulating a schedule with these isolates the simulator's schedule and
    communication model from the cost model: if the replay matches the measured
    iteration time, a prediction error comes from the predicted costs (profile,
    overhead, contention, machine load), not from how the schedule is played.
    Only actions inside ``window_s`` (the steady state) are used when given.
    """
    from stalesim.sim.model import to_ns

    S = costs.stages
    durs: dict[tuple[str, int], list[float]] = {}
    gaps: dict[tuple[str, int], list[float]] = {}
    for rows in rows_by_rank.values():
        rs = sorted(rows, key=lambda r: r[6])
        for i, (_label, kind, stage, _b, _m, _w, t0, t1) in enumerate(rs):
            if window_s is not None and (t1 < window_s[0] or t0 > window_s[1]):
                continue
            durs.setdefault((kind, int(stage)), []).append(t1 - t0)
            if i + 1 < len(rs):
                gaps.setdefault((kind, int(stage)), []).append(max(0.0, rs[i + 1][6] - t1))

    def mean(kind: str, s: int, fallback: int) -> int:
        v = durs.get((kind, s))
        return to_ns(statistics.fmean(v)) if v else fallback

    losses = [x for (k, _s), v in durs.items() if k == "LOSS" for x in v]
    bi, bw = costs.split_ns()
    out = replace(costs,
                  f_ns=tuple(mean("F", s, costs.f_ns[s]) for s in range(S)),
                  b_ns=tuple(mean("B", s, costs.b_ns[s]) for s in range(S)),
                  bi_ns=tuple(mean("I", s, bi[s]) for s in range(S)),
                  bw_ns=tuple(mean("W", s, bw[s]) for s in range(S)),
                  u_ns=tuple(mean("U", s, costs.u_ns[s]) for s in range(S)),
                  loss_ns=to_ns(statistics.fmean(losses)) if losses else costs.loss_ns,
                  # a run's compute already holds what its messages took from it
                  arrival_ns=())
    if not overheads:
        return out

    gap: dict[str, Sequence[int]] = {
        k: tuple(to_ns(statistics.fmean(gaps[(k, s)])) if gaps.get((k, s)) else 0 for s in range(S))
        for k in {k for k, _s in gaps}}
    comm: dict[str, Sequence[int]] = {}
    # the posting kinds (a send, the all-reduce start): the action's own duration is the cost
    for k in (n for n in TRANSFER_NAMES_ORDERED if n.startswith("SEND_") or n == Kind.AR.value):
        if any((k, s) in durs for s in range(S)):
            comm[k] = tuple(to_ns(statistics.fmean(durs[(k, s)])) if durs.get((k, s)) else 0
                            for s in range(S))
    if any(("ARW", s) in durs for s in range(S)):
        c = to_ns(allreduce_times(rows_by_rank, window_s)["complete_s"])
        comm["ARW"] = tuple(c if ("ARW", s) in durs else 0 for s in range(S))
    recv: dict[str, list[int]] = {}
    for o in message_delays(rows_by_rank, window_s).values():
        recv.setdefault(o["kind"], [0] * S)[o["stage"]] = to_ns(o["complete_s"])
    comm.update({k: tuple(v) for k, v in recv.items()})
    return out.with_overheads(gap=gap, comm=comm)


def replay_jitter(rows_by_rank: dict[str, list[list[Any]]],
                  window_s: tuple[float, float] | None = None) -> ActionJitter | None:
    """The run's own spread, as :func:`action_jitter` gives the prediction the stage timing's:
    per compute kind, every action inside ``window_s`` over the mean of its (rank, kind, stage)
    (per rank, so that one rank running steadily slower than another is not taken as
    spread); None when no kind has :data:`MIN_JITTER_SAMPLES`."""
    from stalesim.sim.jitter import ActionJitter

    spans: dict[tuple[str, str, int], list[float]] = {}
    for rank, rows in rows_by_rank.items():
        for _label, kind, stage, _b, _m, _w, t0, t1 in rows:
            if kind in KINDS and (window_s is None or (t1 >= window_s[0] and t0 <= window_s[1])):
                spans.setdefault((rank, kind, int(stage)), []).append(t1 - t0)
    ratios: dict[str, list[float]] = {}
    for (_rank, kind, _s), xs in spans.items():
        m = statistics.fmean(xs)
        if m > 0:
            ratios.setdefault(kind, []).extend(measured_ratio(x / m) for x in xs)
    kept = {k: tuple(v) for k, v in ratios.items() if len(v) >= model.MIN_JITTER_SAMPLES}
    return ActionJitter(kept) if kept else None


def replay(costs: StageCosts, schedule: Any, hw: SimHardware, rows_by_rank: dict[str, list[list[Any]]],
           window_s: tuple[float, float] | None, *, keep_timeline: bool = False) -> SimResult:
    """``schedule`` simulated with one run's measured costs (:func:`replay_costs`, :func:`replay_link`)
    and, as the prediction draws from the stage timing's spread, with the run's own spread
    (:func:`replay_jitter`; the median of the draws): the replay."""
    from stalesim.sim import SimOptions, simulate

    rc = replay_costs(costs, rows_by_rank, window_s)
    link = replay_link(hw, rc, rows_by_rank, window_s)
    jitter = replay_jitter(rows_by_rank, window_s) if schedule.num_devices > 1 else None
    if jitter is None:
        return simulate(rc, schedule, link, SimOptions(keep_timeline=keep_timeline))
    return median_draw(lambda j: simulate(rc, schedule, link, SimOptions(keep_timeline=keep_timeline, jitter=j)),
                       jitter)[0]


def message_delays(rows_by_rank: dict[str, list[list[Any]]],
                   window_s: tuple[float, float] | None = None) -> dict[str, Any]:
    """Per receive kind and stage (``"RECV_F:1"``), from matched send/receive rows (one
    clock for all ranks):

    * ``delays_s``: for receives that blocked (started before the send was posted), the
      time E from the end of the send's post to the end of the receive: the delay L to the
      receiver plus the completion cost c;
    * ``latency_s`` and ``complete_s``: L and c solved together: a receive that started at
      x after its send was posted spans max(0, L - x) + c, so L is the value for which the
      median residual c of those receives and the median E agree (L + c = median E);
    * ``blocked`` / ``ready``: how many of each.
    """
    from stalesim.schedule import Action
    from stalesim.schedule.deps import peer

    by: dict[str, list[Any]] = {}
    for rows in rows_by_rank.values():
        for r in rows:
            by[r[0]] = r
    out: dict[str, Any] = {}
    for label, r in by.items():
        kind = r[1]
        if not str(kind).startswith("RECV_"):
            continue
        if window_s is not None and (r[7] < window_s[0] or r[6] > window_s[1]):
            continue
        pk = peer(Action.parse(label))
        if pk is None:
            continue
        snd = by.get(str(Action(pk[0], pk[2], pk[3], pk[4], pk[1])))
        if snd is None:
            continue
        o = out.setdefault(f"{kind}:{int(r[2])}", {"kind": kind, "stage": int(r[2]), "ready_spans": [],
                                                    "delays_s": []})
        if r[6] >= snd[7]:
            o["ready_spans"].append((r[6] - snd[7], r[7] - r[6]))
        else:
            o["delays_s"].append(r[7] - snd[7])
    for o in out.values():
        rs, ds = o.pop("ready_spans"), o["delays_s"]
        o["ready"], o["blocked"] = len(rs), len(ds)
        o["latency_s"], o["complete_s"] = _solve_delay(rs, ds)
    return out


def _solve_delay(ready: list[tuple[float, float]], delays: list[float]) -> tuple[float, float]:
    """(L, c) with c = median(span - max(0, L - x)) over ready receives and L + c = median(E)
    (bisection: the left side grows with L; when every ready receive still waited, several L
    explain the data and the smallest is taken). Without ready receives c = 0; without
    blocked ones L = 0 and c the median span."""
    if not ready:
        return (statistics.median(delays) if delays else 0.0), 0.0

    def c_of(L: float) -> float:
        return statistics.median(span - max(0.0, L - x) for x, span in ready)

    if not delays:
        return 0.0, c_of(0.0)
    e = statistics.median(delays)
    lo, hi = 0.0, max(0.0, e)
    for _ in range(50):
        mid = (lo + hi) / 2
        if mid + c_of(mid) < e - 1e-9:  # the smallest L that explains the delays
            lo = mid
        else:
            hi = mid
    L = (lo + hi) / 2
    return L, max(0.0, c_of(L))


def _low(xs: list[float], q: float = 0.1) -> float:
    v = sorted(xs)
    return v[int(q * (len(v) - 1))]


def replay_link(hw: SimHardware, costs: StageCosts, rows_by_rank: dict[str, list[list[Any]]],
                window_s: tuple[float, float] | None = None) -> SimHardware:
    """The link the replay uses: latency such that latency + transfer + completion equals the
    measured mean delay of blocked receives (send posted -> receive done), wake-up included;
    the hardware unchanged when nothing blocked (or the rows have no messages)."""
    from stalesim.sim.model import to_ns

    d = message_delays(rows_by_rank, window_s)
    excess: list[float] = []
    for o in d.values():
        s = o["stage"] if o["kind"] == "RECV_B" else o["stage"] - 1
        ser = hw.serialize_ns(costs.msg_bytes[s]) / 1e9 if 0 <= s < costs.stages else 0.0
        # the mean delay, not the median L: rare long stalls cost the run their full length
        excess += [x - ser - o["complete_s"] for x in o["delays_s"]]
    out = hw
    if excess:
        out = replace(out, latency_ns=max(0, to_ns(statistics.fmean(excess))), wake_ns=0)
    ar = allreduce_times(rows_by_rank, window_s)
    if ar["collective_s"]:
        # one bucket size per stage: a constant per collective (the replay's own bytes)
        out = replace(out, allreduce_alpha_ns=to_ns(statistics.fmean(ar["collective_s"])),
                      allreduce_bandwidth_Bps=math.inf)
    return out


def allreduce_times(rows_by_rank: dict[str, list[list[Any]]],
                    window_s: tuple[float, float] | None = None) -> dict[str, Any]:
    """From AR/ARW rows. With E = ARW end - the last worker's AR end: a wait that spans at
    least half of E waited for the collective (``blocked``), and its ``collective_s`` is
    E - ``complete_s`` (the collective, wake-up included); the others found it done or
    nearly (``ready``), and their 10th-percentile span is ``complete_s``. A wait that
    starts long after its start (``pipe-sgd`` overlaps the collective with the next
    batch's compute) and returns soon says only that the collective took at most E; the
    earlier rule (blocked: started within the median E) took those E, a whole iteration,
    as the collective and made the replay of ``pipe-sgd`` 13% slow."""
    ars: dict[tuple[int, int], list[float]] = {}
    arws: list[list[Any]] = []
    for rows in rows_by_rank.values():
        for r in rows:
            if r[1] == "AR":
                ars.setdefault((int(r[2]), int(r[3])), []).append(r[7])
            elif r[1] == "ARW" and (window_s is None or window_s[0] <= r[6] <= window_s[1]):
                arws.append(r)
    pairs = [(r, max(ars[(int(r[2]), int(r[3]))])) for r in arws if ars.get((int(r[2]), int(r[3])))]
    if not pairs:
        return {"collective_s": [], "complete_s": 0.0, "blocked": 0, "ready": 0}
    blocked = [(r, last) for r, last in pairs if r[7] - r[6] >= 0.5 * (r[7] - last)]
    ready = [(r, last) for r, last in pairs if r[7] - r[6] < 0.5 * (r[7] - last)]
    complete = _low([r[7] - r[6] for r, _ in ready]) if ready else 0.0
    coll = [max(0.0, r[7] - last - complete) for r, last in blocked]
    return {"collective_s": coll, "complete_s": complete, "blocked": len(blocked), "ready": len(ready)}
