"""The cost terms: a :class:`~stalesim.cost.model.CostModel` turned into per-stage simulator costs.

Each function adds one measured term to :class:`~stalesim.sim.model.StageCosts` (the
profile's sums or a layout's measured stage times, contention, per-action overhead, the
executor's gaps, per-message CPU costs, the compute a message takes) or to the link
(:func:`link_from_comm`). :mod:`stalesim.cost.apply` composes them for a schedule.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stalesim.cost.model import _SPLIT, KINDS, CostModel
from stalesim.schedule.actions import TRANSFER_NAMES_ORDERED, Kind
from stalesim.validate.stagetime import MODULE_KINDS, StageTimes

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from stalesim.sim.model import SimHardware, StageCosts


def dispatch_counts(sched: Any) -> dict[tuple[str, int], float]:
    """Per (kind, stage) of compute actions: actions the rank dispatches per such action.

    Every action (also SEND/RECV/AR/ARW, which the simulator gives no core time)
    costs the executor loop one dispatch gap; a communication action's gap is
    charged to the compute action before it on the same device (or the next one
    at the start of a list). Derived from the lowered IR, so it holds for any
    schedule.
    """
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
                    dispatch: dict[tuple[str, int], float] | None = None,
                    times: StageTimes | None = None,
                    waits: dict[tuple[str, int], float] | None = None,
                    share: list[float] | None = None, full_share: float = 1.0) -> StageCosts:
    """Per-stage costs: alone/contended interpolation by ``phi[s]`` (the contended cost less
    ``full_share``, the time slices it was measured in, and the result times ``share[s]``, the
    stage's mean time-slice share: :mod:`stalesim.validate.cores`), times the after-wait
    factor ``waits[(kind, stage)]`` (:mod:`stalesim.validate.afterwait`), plus per-action
    overhead, plus ``cm.dispatch_s`` x ``dispatch[(kind, stage)]`` (see :func:`dispatch_counts`).

    With ``times`` (the layout's stage times, :mod:`stalesim.validate.stagetime`) a stage's
    F, B, I, W and the LOSS are the measured ones, which already include the runtime's
    overhead; their contended value is the one measured with co-runners busy where the
    stage times have it, else the measured one scaled by the profile's contended over alone
    ratio for that stage and kind; stage 0's F adds reading its data."""
    from stalesim.sim.model import stage_costs, to_ns

    alone = stage_costs(cm.profile, cuts, batch_size=batch_size, action_batch=action_batch, ppv=ppv)
    S = alone.stages
    phi = list(phi) if phi is not None else [0.0] * S
    base = _per_kind(alone)
    busy = None
    contended = any(p > 0 for p in phi)
    if cm.contended is not None and contended:
        busy = _per_kind(stage_costs(cm.contended, cuts, batch_size=batch_size, action_batch=action_batch,
                                     ppv=ppv))
    if times is not None:
        base, busy = _measured_per_kind(times, base, busy if contended else None, contended=contended)
    cost = {k: _mix(phi, v, None if busy is None else busy[k], share, full_share) for k, v in base.items()}
    for (k, s), f in (waits or {}).items():
        if k in cost and s < S:
            cost[k] = tuple(round(x * f) if i == s else x for i, x in enumerate(cost[k]))
    measured = set(_TIMED) if times is not None else set()
    # a split backward's halves are dispatched like a backward: B's overhead each unless measured
    o = {k: 0.0 if k in measured else cm.overhead_s.get(k, cm.overhead_s.get("B", 0.0) if k in _SPLIT else 0.0)
         for k in KINDS}
    dc = dispatch or {}

    disp = 0.0 if cm.gaps_s else cm.dispatch_s  # per-kind gaps (runtime_overheads) replace it

    def extra(kind: str, s: int) -> int:
        return to_ns(o[kind] + disp * dc.get((kind, s), 1.0)) + (
            to_ns(times.mean_s[0].get("DATA", 0.0)) if times is not None and kind == "F" and s == 0 else 0)

    # the profile's last block includes the loss arithmetic; the LOSS action adds its overhead
    loss_extra = max((extra("LOSS", s) for s in range(S) if ("LOSS", s) in dc), default=extra("LOSS", S - 1))
    loss = alone.loss_ns if times is None else to_ns(max((t.get("LOSS", 0.0) for t in times.mean_s), default=0.0))
    def add(kind: str) -> tuple[int, ...]:
        return tuple(x + extra(kind, s) for s, x in enumerate(cost[kind]))

    return replace(alone, f_ns=add("F"), b_ns=add("B"), u_ns=add("U"), bi_ns=add("I"), bw_ns=add("W"),
                   loss_ns=loss + loss_extra)


#: the kinds a stage time replaces: those that run the stage's modules (the update stays the
#: profile's), and the LOSS
_TIMED = (*MODULE_KINDS, Kind.LOSS.value)


def _per_kind(costs: StageCosts) -> dict[str, tuple[int, ...]]:
    bi, bw = costs.split_ns()
    return {"F": costs.f_ns, "B": costs.b_ns, "U": costs.u_ns, "I": bi, "W": bw}


def _mix(phi: list[float], a: tuple[int, ...], b: tuple[int, ...] | None, share: list[float] | None = None,
         full_share: float = 1.0) -> tuple[int, ...]:
    """``((1 - phi) * alone + phi * contended / full_share) * share`` per stage (``share`` 1 and
    ``full_share`` 1 where the ranks do not outnumber the cores: the plain interpolation).
    Co-runners never make a rank faster: a contended cost below the alone one is measurement
    noise, and using it made busy configurations cheaper per sample than the one-device
    baseline (2.02x on 2 devices in `make demo`); it is floored at alone."""
    sh = share or [1.0] * len(a)
    if b is None:
        return a if share is None else tuple(round(x * f) for x, f in zip(a, sh))
    return tuple(round(((1 - p) * x + p * max(x, y / full_share)) * f) for p, x, y, f in zip(phi, a, b, sh))


def _measured_per_kind(times: StageTimes, alone: dict[str, tuple[int, ...]],
                       busy: dict[str, tuple[int, ...]] | None, *, contended: bool = False
                       ) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]] | None]:
    """The measured stage times in place of the profile's sums (a kind a stage did not run
    keeps the sum), and, when ``contended`` costs are wanted, the stage times measured with
    co-runners busy where there are any (a kind they lack: the alone time), else the
    measured ones scaled by the profile's contended/alone ratio (``busy``)."""
    from stalesim.sim.model import to_ns

    med = times.mean_s
    if len(med) != len(alone["F"]):
        raise ValueError(f"stage times for {len(med)} stages, the partition has {len(alone['F'])}")
    base = dict(alone)
    for k in MODULE_KINDS:
        base[k] = tuple(to_ns(med[s][k]) if k in med[s] else a for s, a in enumerate(alone[k]))
    if not contended:
        return base, None
    if times.contended is not None and len(times.contended.mean_s) == len(med):
        scaled = dict(busy) if busy is not None else dict(alone)
        for k in MODULE_KINDS:
            scaled[k] = tuple(to_ns(c[k]) if k in c else m for c, m in zip(times.contended.mean_s, base[k]))
        return base, scaled
    if busy is None:
        return base, None
    scaled = dict(busy)
    for k in MODULE_KINDS:
        scaled[k] = tuple(round(x * c / a) if a > 0 else x for x, a, c in zip(base[k], alone[k], busy[k]))
    return base, scaled


def runtime_overheads(cm: CostModel, sched: Any, costs: StageCosts, *, recv_ahead: int = 8,
                      label_bytes: int = 0) -> StageCosts:
    """``costs`` with the calibrated per-action runtime costs (never measured on the run
    being predicted):

    * ``gap_ns``: after F/B/U/LOSS the 1-rank run's median gap of that kind (after I and
      W: B's, the baseline splits no backward); after a send
      or a receive the loop alone (``gaps_s["comm"]``), plus, after a receive, waiting on
      the sends it releases (:func:`stalesim.schedule.completion.send_release`: how many per
      receive, from the IR) at the calibrated cost of one;
    * ``comm_ns``: posting a send of stage s's message (:func:`send_post_fit`), completing a
      receive and posting the next (``complete``), the all-reduce start and wait (``ar_post``,
      ``ar_complete`` at the stage's gradient bytes), plus the labels message the first
      send of each batch carries (averaged over the stage's sends);
    * the compute a message takes from a rank while it moves (``lost_sender``,
      ``lost_receiver``): the sender's is added to the gap after its post, the receiver's is
      ``arrival_ns``, which the event engine charges only to a receive that finds its
      message there (one that blocked lost no compute to it).

    The bytes are the stage's (``msg_bytes``, ``param_bytes``); the fits are
    :mod:`stalesim.validate.commcal`'s. Without calibration the costs come back unchanged.
    """
    from stalesim.schedule.completion import send_release
    from stalesim.sim.model import to_ns
    from stalesim.validate.commcal import cost

    S = costs.stages
    gap: dict[str, list[int]] = {}
    if cm.gaps_s:
        loop = cm.gaps_s.get("comm", min(cm.gaps_s.values()))
        for k in KINDS:  # the halves of a split backward: B's gap unless measured (the
            # 1-rank baseline splits no backward)
            dflt = cm.gaps_s.get("B", loop) if k in _SPLIT else loop
            gap[k] = [to_ns(cm.gaps_s.get(k, dflt))] * S
        for k in TRANSFER_NAMES_ORDERED:
            gap[k] = [to_ns(loop)] * S
    com: dict[str, list[int]] = {}
    arrival: dict[str, list[int]] = {}  # filled by _message_losses
    c = cm.comm
    if c:
        msg = costs.msg_bytes
        sends, carry = _forward_messages(sched, Kind.SEND_F)
        recvs, carry_r = _forward_messages(sched, Kind.RECV_F)
        post = send_post_fit(c)
        lab_post = cost(post, label_bytes) if label_bytes else 0.0
        lab_done = cost(c["complete"], label_bytes) if label_bytes else 0.0
        com["SEND_F"] = [to_ns(cost(post, msg[s]) + lab_post * carry[s] / max(1, sends[s]))
                         for s in range(S)]
        com["SEND_B"] = [to_ns(cost(post, msg[s - 1])) if s > 0 else 0 for s in range(S)]
        com["RECV_F"] = [to_ns(cost(c["complete"], msg[s - 1]) + lab_done * carry_r[s] / max(1, recvs[s]))
                         if s > 0 else 0 for s in range(S)]
        com["RECV_B"] = [to_ns(cost(c["complete"], msg[s])) for s in range(S)]
        com["AR"] = [to_ns(cost(c["ar_post"], costs.param_bytes[s])) for s in range(S)]
        com["ARW"] = [to_ns(cost(c["ar_complete"], costs.param_bytes[s])) for s in range(S)]
        arrival = _message_losses(c, msg, gap)
        rel_cost = c.get("release", {}).get("alpha_s", 0.0)
        if cm.gaps_s and rel_cost:  # a receive releases the sends it proves complete: one wait each
            per_recv: Counter = Counter()
            n_recv: Counter = Counter()
            for d, rel in enumerate(send_release(sched, recv_ahead=recv_ahead)):
                acts = sched.device_actions[d]
                released = Counter(j for j in rel.values() if j < len(acts))
                for j, a in enumerate(acts):
                    if a.kind.value.startswith("RECV"):
                        n_recv[(a.kind.value, a.stage)] += 1
                        per_recv[(a.kind.value, a.stage)] += released.get(j, 0)
            for (k, st), n in n_recv.items():
                gap[k][st] += to_ns(rel_cost * per_recv[(k, st)] / n)
    if not gap and not com:
        return costs
    return costs.with_overheads(gap={k: tuple(v) for k, v in gap.items()},
                                comm={k: tuple(v) for k, v in com.items()},
                                arrival={k: tuple(v) for k, v in arrival.items()})


def _message_losses(comm: dict[str, Any], msg: Sequence[int], gap: dict[str, list[int]]) -> dict[str, list[int]]:
    """What a message takes from the compute it moves during (commcal's ``lost_*``; absent in
    calibrations written before they were measured): the sender's is added to ``gap`` after
    each post (in place), the receiver's is returned as the receives' arrival cost, which
    the event engine charges when a receive finds its message there."""
    from stalesim.sim.model import to_ns
    from stalesim.validate.commcal import cost

    S = len(msg)
    upstream = [0, *msg[:-1]]  # stage s's input: stage s - 1's output (what its F receives, its B sends)
    received = {Kind.RECV_F.value: upstream, Kind.RECV_B.value: list(msg)}
    sent = {Kind.SEND_F.value: list(msg), Kind.SEND_B.value: upstream}
    if "lost_sender" in comm:
        for k, nbytes in sent.items():
            row = gap.setdefault(k, [0] * S)
            for s in range(S):
                row[s] += to_ns(cost(comm["lost_sender"], nbytes[s])) if nbytes[s] else 0
    if "lost_receiver" not in comm:
        return {}
    return {k: [to_ns(cost(comm["lost_receiver"], n)) if n else 0 for n in nbytes]
            for k, nbytes in received.items()}


def _forward_messages(sched: Any, kind: Kind) -> tuple[Counter[int], Counter[int]]:
    """Per stage, how many ``kind`` actions (``SEND_F`` or ``RECV_F``) the schedule has, and
    how many of them carry a batch's labels as well (the executor's rule,
    :func:`stalesim.schedule.comm.label_carriers`)."""
    from stalesim.schedule.comm import label_carriers

    every: Counter[int] = Counter()
    carry: Counter[int] = Counter()
    for acts in sched.device_actions:
        carriers = label_carriers(acts)
        for i, a in enumerate(acts):
            if a.kind is kind:
                every[a.stage] += 1
                if i in carriers:
                    carry[a.stage] += 1
    return every, carry


def send_post_fit(comm: dict[str, Any]) -> dict[str, float]:
    """Posting a send as the executor posts it: gloo writes a payload in the posting thread
    once the peer has announced its receive, and the executor posts its receives
    ``RECV_AHEAD`` actions ahead, so in a pipeline the post copies the whole message through
    the loopback socket. Its cost is the calibrated post overhead (``post`` alpha) plus the
    message at the calibrated copy rate of the link (``arrive`` beta: the same bytes through
    the same socket); the link then adds only its latency (:func:`link_from_comm`).
    ``commcal``'s own ``post`` is flat because its receiver announces after the send."""
    post = comm["post"]
    if "arrive" not in comm:
        return post
    return {"alpha_s": post["alpha_s"], "beta_s_per_byte": max(post["beta_s_per_byte"],
                                                               comm["arrive"]["beta_s_per_byte"])}


def link_from_comm(hw: SimHardware, comm: dict[str, Any] | None,
                   allreduce_measured: list[dict[str, Any]] | None = None, workers: int = 2) -> SimHardware:
    """The link the prediction uses: one-way delay to a blocked receiver beyond posting
    (``arrive`` - :func:`send_post_fit`: alpha = latency, wake-up included; 1/beta = bandwidth
    beyond what the post moved), and the
    all-reduce as measured by ``calibrate`` at this worker count (alpha-beta fit to the mean
    times, or to the medians of files written before the means were kept) when given."""
    from stalesim.sim.model import to_ns
    from stalesim.validate.commcal import fit_linear

    out = hw
    if comm and "arrive" in comm:
        # arrive is timed from the start of the post; the simulated message leaves at its end,
        # and the post already moved the payload (send_post_fit): what remains is the latency
        a, post = comm["arrive"], send_post_fit(comm)
        beta = max(0.0, a["beta_s_per_byte"] - post["beta_s_per_byte"])
        bw = 1.0 / beta if beta > 0 else math.inf
        out = replace(out, latency_ns=to_ns(max(0.0, a["alpha_s"] - post["alpha_s"])), bandwidth_Bps=bw,
                      wake_ns=0)
    pts = [m for m in (allreduce_measured or []) if int(m.get("workers", 0)) == workers]
    if len(pts) >= 2:
        # the mean collective where calibrate kept it (a run pays the mean every iteration; the
        # median of a long-tailed time is below it), else the median older files hold
        alpha, beta = fit_linear([float(m["bytes"]) for m in pts], [float(m.get("mean_s", m["seconds"])) for m in pts])
        out = replace(out, allreduce_alpha_ns=to_ns(alpha),
                      allreduce_bandwidth_Bps=(1.0 / beta) if beta > 0 else math.inf)
    return out
