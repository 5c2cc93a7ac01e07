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
  (:func:`stalesim.validate.corunners.contended_profile`), and each stage layout is
  timed alone and with co-runners busy in the same passes, spread between the rounds
  of the measured runs (:class:`stalesim.validate.stagetime.LayoutTimer`; where those
  contended stage times exist they are the contended cost, since on a virtual machine
  the contention comes and goes with the host's load and a profile taken before the
  runs missed it). A stage's cost is the interpolation
  ``(1 - phi) * alone + phi * contended`` where ``phi`` is the fraction of that
  device's busy time during which the other devices are busy too, read from the
  simulated timeline itself (:func:`busy_overlap`) and iterated to a fixed point
  (:func:`simulate_with_costs`). A sequential schedule (ranks never overlap)
  thus gets the alone costs and a full pipeline the contended ones, with no
  per-schedule factor anywhere.
* **Action jitter** (:func:`action_jitter`): an action's time is a draw around its mean,
  and a pipeline's waits take the later of two draws, so mean costs alone are optimistic
  wherever devices wait on each other (:mod:`stalesim.sim.jitter`). The spread is the stage
  timing's own, each round over its pass's mean; the prediction is the median of
  :data:`JITTER_DRAWS` simulations with every compute action drawn from it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.schedule.actions import (
    COMPUTE_NAMES_ORDERED,
    SPLIT_BACKWARD_KINDS,
    TRANSFER_NAMES_ORDERED,
    Kind,
)
from stalesim.sim.jitter import measured_ratio
from stalesim.validate.afterwait import wait_factors
from stalesim.validate.cores import busy_concurrency, busy_share, core_share
from stalesim.validate.stagetime import (
    MODULE_KINDS,
    LayoutKey,
    StageTimes,
    contention_by_batch,
    hooked_stages,
    layout_key,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Sequence

    from stalesim.sim.jitter import ActionJitter
    from stalesim.sim.model import SimHardware, StageCosts
    from stalesim.sim.result import SimResult
    from stalesim.workloads.profile import Profile

KINDS = COMPUTE_NAMES_ORDERED  # F, B, U, LOSS, then I, W: the halves of a split backward
#: simulations with drawn action times per prediction; odd, so that the median is one
#: simulated run, whose timeline, utilization and attribution agree with its iteration time
JITTER_DRAWS = 5
#: the fewest rounds of a kind's spread the prediction draws from (fewer: that kind keeps its mean)
MIN_JITTER_SAMPLES = 6
_SPLIT = tuple(k.value for k in SPLIT_BACKWARD_KINDS)


@dataclass
class CostModel:
    """Everything needed to turn a schedule into per-stage simulator costs."""

    profile: Profile  # one rank alone, the ranks' thread count and device
    contended: Profile | None = None  # the same with the other ranks busy (CPU ranks)
    overhead_s: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in KINDS})
    notes: list[str] = field(default_factory=list)
    dispatch_s: float = 0.0  # executor loop time between two consecutive actions of a rank
    # the runtime's time after each action kind (dispatch loop, memory sample),
    # from the 1-rank run's gaps ("comm": after a send or receive), and the per-message
    # CPU costs and delays of :mod:`stalesim.validate.commcal` (None: not calibrated)
    gaps_s: dict[str, float] = field(default_factory=dict)
    comm: dict[str, Any] | None = None
    # extra F/B seconds per stage when it runs under the version hooks, and the LOSS action's
    # cost, keyed by (PPV, action batch), as folders written before ``stage_times`` stored them
    hook_s: dict[tuple, list[dict[str, float]]] = field(default_factory=dict)
    # each stage layout's action times measured on its real stages, as the executor runs them
    # (:mod:`stalesim.validate.stagetime`); where present they replace the per-layer sums,
    # the runtime overhead and the hook cost above (``hook_s`` is read from folders written
    # before stage times were measured)
    stage_times: dict[LayoutKey, StageTimes] = field(default_factory=dict)
    # a layout's contended times from the ratio pooled over the layouts at its action batch
    # (stagetime.contention_by_batch); False: each layout's own contended times, as the model
    # predicted before 2026-11-29 noon (what re-predicting older folders exactly needs)
    pooled_contention: bool = True
    # the cores the CPU ranks share (their CPU affinity when the validation ran; None: not
    # known, or GPU ranks): with more ranks x threads than cores the contended times hold the
    # time slices the processes take turns in, charged by :mod:`stalesim.validate.cores`
    host_cores: int | None = None

    def contention_ratio(self, batch_size: int | None = None) -> float | None:
        """Sum of per-layer compute (F+B+U), contended over alone, at ``batch_size``."""
        if self.contended is None:
            return None
        b = batch_size or self.profile.batch_size
        a = sum(lp.compute_s for lp in self.profile.at_batch_size(b).layers)
        c = sum(lp.compute_s for lp in self.contended.at_batch_size(b).layers)
        return c / a if a > 0 else None

    def timing_passes(self) -> int:
        """How many timing passes kept their own means (:class:`~stalesim.validate.stagetime.
        LayoutTimer`; 0 when the stage times were not timed in passes)."""
        return max((len(t.pass_means_s) for t in self.stage_times.values()), default=0)

    def of_pass(self, k: int) -> CostModel:
        """This model with the stage times timing pass ``k`` alone measured
        (:meth:`StageTimes.of_pass`): what the prediction would have been at that moment."""
        return replace(self, stage_times={key: t.of_pass(k) for key, t in self.stage_times.items()})

    def with_pass_medians(self) -> CostModel:
        """This model with each stage time the median over its passes (:meth:`StageTimes.with_pass_medians`)."""
        return replace(self, stage_times={key: t.with_pass_medians() for key, t in self.stage_times.items()})

    def to_dict(self) -> dict[str, Any]:
        return {"overhead_s": dict(self.overhead_s), "dispatch_s": self.dispatch_s,
                "gaps_s": dict(self.gaps_s),
                "hook_s": {f"ppv={list(k[0])} batch={k[1]}": v for k, v in self.hook_s.items()},
                "stage_times": [{"layout": k.to_dict(), "label": k.text(),
                                 "contention_ratio": v.contention_ratio(),
                                 "wait_ratios": {k: [list(p) for p in c] for k, c in wait_curves(v).items()},
                                 **v.to_dict()}
                                for k, v in self.stage_times.items()],
                "host_cores": self.host_cores,
                "comm": None if self.comm is None else {k: v for k, v in self.comm.items()
                                                        if k in ("sizes", "repeats", "device")
                                                        or isinstance(v, dict)},
                "contention_ratio": self.contention_ratio(),
                # what the prediction uses: per action batch, pooled over its layouts
                "contention_by_action_batch": {str(b): r for b, r in
                                               sorted(contention_by_batch(self.stage_times).items())},
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


def busy_overlap(result: SimResult) -> list[float]:
    """Per device: mean number of *other* devices computing while it computes, / (n-1).

    Read from the simulated timeline inside its steady window (1.0: the others
    are always busy when this one is; 0.0: they never overlap).
    """
    if result.timeline is None:
        raise ValueError("busy_overlap: needs an event-simulation result")
    n = result.devices
    if n <= 1:
        return [0.0] * n
    out = []
    for h in busy_concurrency(result):
        total = sum(h.values())
        out.append(sum(t * (k - 1) for k, t in h.items()) / total / (n - 1) if total else 0.0)
    return out


def stage_phi(sched: Any, overlap: list[float]) -> list[float]:
    """Device overlaps -> per-stage interpolation weights (stage s lives on device s,
    or every stage on every worker for data-parallel schedules)."""
    stages = sched.stages
    if not overlap:
        return [0.0] * stages
    if sched.data_parallel or len(overlap) != sched.num_devices:
        m = sum(overlap) / len(overlap)
        return [m] * stages
    return [overlap[sched.device_of(s, 0)] for s in range(stages)]  # virtual stages: their device


def with_hook_overhead(cm: CostModel, sched: Any, costs: StageCosts, ppv: list[int], action_batch: int
                       ) -> StageCosts:
    """Add the measured cost of the version hooks to the F and B (I and W) of the stages that need them
    and of reading the data to stage 0's F, and take the LOSS action's cost as measured
    through the runtime (when they were measured)."""
    extra = cm.hook_s.get((tuple(ppv), action_batch))
    if not extra or len(extra) != costs.stages:
        return costs
    from stalesim.sim.model import to_ns

    hooked = hooked_stages(sched)
    losses = [e["LOSS"] for e in extra if "LOSS" in e]
    data = to_ns(extra[0].get("DATA", 0.0))  # stage 0's F reads its slice of the data
    # a split backward unpacks the same saved tensors: B's hook cost, shared by I and W in
    # proportion to their times
    bi, bw = costs.split_ns()
    hb = [to_ns(extra[s]["B"]) if hooked[s] else 0 for s in range(costs.stages)]
    share = [i / (i + w) if i + w > 0 else 0.5 for i, w in zip(bi, bw)]
    return replace(costs,
                   bi_ns=tuple(i + round(h * f) for i, h, f in zip(bi, hb, share)),
                   bw_ns=tuple(w + h - round(h * f) for w, h, f in zip(bw, hb, share)),
                   f_ns=tuple(f + (to_ns(extra[s]["F"]) if hooked[s] else 0) + (data if s == 0 else 0)
                              for s, f in enumerate(costs.f_ns)),
                   b_ns=tuple(b + (to_ns(extra[s]["B"]) if hooked[s] else 0) for s, b in enumerate(costs.b_ns)),
                   loss_ns=to_ns(max(losses)) if losses else costs.loss_ns)


def with_memory_facts(costs: StageCosts, facts: list[dict[str, Any]] | None) -> StageCosts:
    """The stage costs with the bytes the memory model reads replaced by ones measured as
    the executor counts them (:func:`stalesim.runtime.memfacts.stage_memory_facts`): ints per
    stage, and on a GPU ``cuda_transient``, a per-kind dict of bytes."""
    if not facts:
        return costs
    if len(facts) != costs.stages:
        raise ValueError(f"memory facts for {len(facts)} stages, costs have {costs.stages}")
    wg = tuple(f.get("deferred_w", 0) for f in facts)
    # measured on a GPU only: per stage {kind: bytes}, and the process's library bytes
    kinds = sorted({k for f in facts for k in f.get("cuda_transient", {})})
    transient = tuple((k, tuple(int(f.get("cuda_transient", {}).get(k, 0)) for f in facts)) for k in kinds)
    library = max((int(f.get("cuda_library", 0)) for f in facts), default=0)
    return replace(costs, param_bytes=tuple(f["params"] for f in facts),
                   saved_bytes=tuple(f["activation"] for f in facts),
                   buffer_bytes=tuple(f["buffers"] for f in facts),
                   wgrad_bytes=wg if any(wg) else costs.wgrad_bytes,
                   transient_bytes=transient or costs.transient_bytes,
                   library_bytes=library or costs.library_bytes,
                   optimizer_bytes=tuple(f["optimizer"] for f in facts) if all("optimizer" in f for f in facts)
                   else costs.optimizer_bytes)


def measured_memory_facts(cfg: Any, sched: Any, *, device: str = "cpu",
                          ppv: list[int] | None = None) -> list[dict[str, Any]]:
    """Per stage, the bytes the memory model reads, measured on ``device`` as the executor
    counts them (:func:`stalesim.runtime.memfacts.stage_memory_facts`), plus on a GPU the
    CUDA terms (:func:`stalesim.runtime.memfacts.stage_cuda_memory_terms`): ``cuda_transient``
    ({action kind: bytes an action holds beyond the states around it}) and ``cuda_library``
    (the process's bytes no tensor owns, the same on every stage); absent on a CPU, where
    the count is exact."""
    from stalesim.runtime.memfacts import stage_cuda_memory_terms, stage_memory_facts

    facts: list[dict[str, Any]] = list(stage_memory_facts(cfg, sched, ppv=ppv, device=device))
    if str(device).startswith("cuda"):
        terms = stage_cuda_memory_terms(cfg, sched, ppv=ppv, device=device)
        facts = [dict(f, cuda_transient={k: int(v[s]) for k, v in terms.transient.items()},
                      cuda_library=terms.library) for s, f in enumerate(facts)]
    return facts


def predicted_peaks(cfg: Any, *, device: str = "cpu", recv_ahead: int) -> list[int]:
    """The memory model's peak bytes per device for the run ``cfg`` (a TrainConfig), with stage
    facts measured on ``device`` as the executor counts them (the optimizer's state included:
    every optimizer, per parameter): what validate predicts, without the timing model (uniform
    costs; memory does not depend on time)."""
    from stalesim.schedule import build_schedule
    from stalesim.sim.memory import memory_report
    from stalesim.sim.model import uniform_costs

    sched = build_schedule(cfg.schedule_config(cfg.iterations))
    facts = measured_memory_facts(cfg, sched, device=device)
    costs = with_memory_facts(uniform_costs(sched.stages, 1, 1), facts)
    costs = replace(costs, msg_bytes=tuple(f["message"] for f in facts))
    return list(memory_report(sched, costs, optimizer_state_factor=1.0 if cfg.momentum else 0.0,
                              recv_ahead=recv_ahead).peak_bytes)


def simulate_with_costs(cm: CostModel, hw: SimHardware, cfg: Any, *, ppv: list[int] | None,
                        batch_size: int, rounds: int = 4, tol: float = 0.002,
                        memory_facts: list[dict[str, int]] | None = None,
                        recv_ahead: int = 1) -> tuple[SimResult, dict]:
    """Event-simulate the schedule of ``cfg`` (a ScheduleConfig, built once through the IR)
    with the cost model; contention by fixed-point iteration. ``memory_facts`` (per stage,
    measured) and ``recv_ahead`` (receives the runtime keeps posted) feed the memory model.

    Returns the result and ``{"phi": per-stage weights, "rounds": n, "history": [...]}``.
    """
    from stalesim.schedule import build_schedule
    from stalesim.sim import SimOptions, simulate
    from stalesim.sim.model import resolve_cuts

    sched = build_schedule(cfg)
    S = sched.stages
    ab = sched.action_batch_size(batch_size)
    cuts, ppv_used = resolve_cuts(cm.profile, S, ppv if S > 1 else None, batch_size)
    phi = [0.0] * S
    history: list[float] = []
    result = None
    # the per-kind gaps (cm.gaps_s) replace the older single dispatch gap charged to compute
    dispatch = dispatch_counts(sched) if cm.dispatch_s > 0 and not cm.gaps_s else None
    times = cm.stage_times.get(layout_key(sched, ppv_used, batch_size))
    if times is not None:  # the means over every round of every pass (the per-pass means kept
        # beside them feed the prediction noise, not the prediction: docs/validate.md), with the
        # contention pooled over the layouts at this action batch (stagetime.contention_by_batch)
        times = times.pooled()
        pooled = contention_by_batch(cm.stage_times).get(ab) if cm.pooled_contention else None
        if pooled is not None:
            times = times.with_contention(pooled)
    curves = wait_curves(times)
    waits: dict[tuple[str, int], float] = {}
    slices = _time_slices(cm, sched)
    share: list[float] | None = None
    for r in range(max(1, rounds)):
        costs = stage_costs_for(cm, cuts, ppv_used, batch_size=batch_size, action_batch=ab, phi=phi,
                                dispatch=dispatch, times=times, waits=waits, share=share,
                                full_share=slices[1] if slices else 1.0)
        costs = runtime_overheads(cm, sched, costs, recv_ahead=recv_ahead,
                                  label_bytes=8 * (batch_size // max(1, sched.workers)))
        if times is None:  # measured stage times already include the hooks, the LOSS and the data
            costs = with_hook_overhead(cm, sched, costs, ppv_used, ab)
        costs = with_memory_facts(costs, memory_facts)
        result = simulate(costs, sched, hw, SimOptions(recv_ahead=recv_ahead))
        history.append(result.iteration_time_s)
        if not (has_contention(cm, times) or curves or slices) or result.devices <= 1:
            break
        new_phi = stage_phi(sched, busy_overlap(result))
        if r > 0 and len(history) >= 2 and abs(history[-1] - history[-2]) <= tol * history[-2]:
            break
        phi = new_phi
        if slices:
            share = stage_phi(sched, busy_share(result, cm.host_cores, slices[0]))
        if curves:
            waits = wait_factors(result, curves)
    assert result is not None
    jitter = action_jitter(times)
    drawn: list[float] = []
    if jitter is not None and result.devices > 1:  # one device never waits on another
        result, drawn = median_draw(lambda j: simulate(costs, sched, hw, SimOptions(recv_ahead=recv_ahead, jitter=j)),
                                    jitter)
    return result, {"phi": phi, "core_share": share, "rounds": len(history), "history": history,
                    "mean_costs_s": history[-1], "jitter_draws_s": drawn,
                    "jitter_spread": {} if jitter is None else jitter.spread(),
                    "wait_factors": {f"{k}:{s}": f for (k, s), f in sorted(waits.items())},
                    "cuts": list(cuts), "ppv": list(ppv_used), "action_batch": ab, "costs": costs,
                    "schedule": sched}


def _time_slices(cm: CostModel, sched: Any) -> tuple[int, float] | None:
    """``(threads per rank, the share its contended times were measured in)`` where the ranks
    of ``sched`` outnumber ``cm.host_cores`` (:mod:`stalesim.validate.cores`), else None."""
    threads = int(cm.profile.threads or 1)
    full = core_share(sched.num_devices, cm.host_cores, threads)
    return (threads, full) if full > 1.0 else None


def median_draw(run: Callable[[ActionJitter], SimResult], jitter: ActionJitter) -> tuple[SimResult, list[float]]:
    """``run`` with :data:`JITTER_DRAWS` seeds of ``jitter``: the run of median iteration time
    (one simulated run: its timeline agrees with its time) and every draw's time, sorted."""
    runs = sorted((run(jitter.with_seed(k)) for k in range(JITTER_DRAWS)), key=lambda r: r.iteration_time_s)
    return runs[len(runs) // 2], [r.iteration_time_s for r in runs]


def action_jitter(times: StageTimes | None) -> ActionJitter | None:
    """The spread a layout's actions are drawn with (:mod:`stalesim.sim.jitter`): per compute
    kind, every round of its stage timing over its pass's mean, alone and contended pooled (a
    kind with fewer than :data:`MIN_JITTER_SAMPLES` keeps its mean); None without any (stage
    times from before the spread was kept, or no stage times)."""
    from stalesim.sim.jitter import ActionJitter

    if times is None:
        return None
    pooled: dict[str, list[float]] = {}
    for t in (times, times.contended):
        for k, v in (t.round_ratios.items() if t is not None else ()):
            pooled.setdefault(k, []).extend(v)
    ratios = {k: tuple(v) for k, v in pooled.items() if len(v) >= MIN_JITTER_SAMPLES}
    return ActionJitter(ratios) if ratios else None


def wait_curves(times: StageTimes | None) -> dict[str, list[tuple[float, float]]]:
    """The after-wait curves of a layout (:mod:`stalesim.validate.afterwait`): those measured
    with co-runners busy (a rank waits while another computes); none without them."""
    if times is None or times.contended is None:
        return {}
    return times.contended.wait_ratios()


def has_contention(cm: CostModel, times: StageTimes | None) -> bool:
    """Is there a contended cost to interpolate towards: the contended profile, or stage
    times measured with co-runners busy?"""
    return cm.contended is not None or (times is not None and times.contended is not None)


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
    kept = {k: tuple(v) for k, v in ratios.items() if len(v) >= MIN_JITTER_SAMPLES}
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


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
