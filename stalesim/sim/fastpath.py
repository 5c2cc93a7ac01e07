"""Fast path: closed-form / steady-state iteration time per schedule, no events.

Uses the same integer :class:`~stalesim.sim.model.StageCosts` and hardware as
the event simulation, so where the formulas are exact the two agree to the
nanosecond. Notation: stage s has forward F_s and backward B_s per action
(micro-batch or worker slice), update U_s, loss L on loss stages; a message
over boundary s holds its channel ser_s = bytes/bandwidth and arrives
latency a later; on hardware without copy engines each transfer of time T also
costs occupancy x T of the core at both ends (folded into F_s/B_s here).

* **periodic asynchronous** (``pipedream``, ``stale``, ``2bw``, ``local``):
  the max-plus period is the bottleneck resource's work per mini-batch,
  ``max(max_d sum_{s on d} (M (F_s + B_s + L_s) + U_s), max_channel M ser)``,
  and, for schedules whose backward crosses stages, at least each stage's
  round trip divided by the items it keeps in flight (S - s, 2(S-1-s)+1,
  S - s micro-batches): latency-bound pipelines.
* **GPipe**: two flow shops with identical jobs (stages and channels are the
  machines, latencies pure delays): the last of M jobs leaves machine k at
  ``sum_{j<=k} p_j + sum delays + (M - 1) max_{j<=k} p_j``; forward, then
  backward from the last stage, then each stage's update. Uniform, ideal link:
  (M + S - 1)(F + B).
* **1F1B** (flush): ``sum_s (F_s + B_s) + L + 2 sum_s (a + ser_s)
  + (M - 1) max_s (F_s + B_s [+ L]) + U_0``; uniform, ideal: (M + S - 1)(F + B).
* **sequential**: one batch's critical path, forward then backward, + U_0.
* **dp**: per-stage gradient buckets all-reduced on one FIFO ring as each
  stage's backward finishes (DDP): c_s = max(c_{s+1}, r_s) + AR_s, then the
  updates. Without overlap the textbook synchronous T_comp + T_up + T_comm.
* **pipe-sgd**: max(T_comp + T_up, T_comm) (plus the core share of the
  all-reduce on hardware without copy engines).
* **hybrid**: (switch + S - 1) stale periods + (N - switch) sequential batches,
  averaged over the N batches.
* **flush** (virtual stages, split backward: interleaved 1F1B, looped BFS,
  ZB-H1/H2, ZB-V, DualPipeV): one flushed batch of the schedule's own device
  lists evaluated exactly, without events (each action starts when its device
  is free and its input has arrived; FIFO channels; I and W at their own costs);
  the iteration is the largest device span (first start to last end), since
  every device repeats its batch with the same relative timing. Their
  uniform-cost bubbles ((R-1)/(V M) of the work for interleaving, a third of
  1F1B's for ZB-H1, none for ZB-H2/ZB-V with F = I = W) are tested against
  this and the event path.

What the fast path ignores (where it and the event path can differ) is listed
in docs/simulator.md: transients (non-uniform stages take a few batches to
settle), latency-induced cycles other than the round trip, contention between
forward and backward messages on shared (``nic``/``bus``) channels, the
per-transfer FIFO interaction of CPU-side communication with compute, and
updates that outlast the next batch's arrival in flush schedules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from stalesim.errors import StalesimError
from stalesim.schedule import Phase, Schedule, get_spec
from stalesim.schedule.liveness import in_flight_per_stage
from stalesim.schedule.spec import ScheduleSpec
from stalesim.sim.model import SimHardware, StageCosts


@dataclass
class FastResult:
    """Steady-state iteration (ns per mini-batch) and per-device busy time per batch."""

    iteration_ns: float
    makespan_ns: float
    busy_ns: list[float]  # per device, per mini-batch
    formula: str
    terms: dict[str, float] = field(default_factory=dict)


@dataclass
class _Pipe:
    """Per-stage costs of one configuration with the link folded in (see module doc)."""

    S: int
    M: int
    F: list[float]
    B: list[float]
    U: list[float]
    loss: list[float]
    T: Sequence[float]
    ser: Sequence[float]
    lat: float
    crosses: list[bool]
    dev: list[int]
    busy: list[float]
    chan_max: float


def _pipe(sched: Schedule, costs: StageCosts, hw: SimHardware) -> _Pipe:
    S = costs.stages
    M = sched.microbatches if sched.uses_micro else 1
    dev = [sched.device_of(s) for s in range(S)]
    D = max(dev) + 1
    lat = hw.latency_ns
    ser = [hw.serialize_ns(b) for b in costs.msg_bytes]
    crosses = [s < S - 1 and dev[s] != dev[s + 1] for s in range(S)]  # boundary s -> s+1
    T = [lat + ser[s] if crosses[s] else 0 for s in range(S)]
    cpu = [hw.cpu_ns(T[s]) for s in range(S)]
    local = sched.local_loss
    L = costs.loss_ns
    loss: list[float] = [L if sched.has_loss(s) else 0 for s in range(S)]
    F: list[float] = [costs.f_ns[s] + (cpu[s - 1] if s > 0 else 0) + cpu[s] for s in range(S)]
    B: list[float]
    if local:
        B = list(costs.b_ns)
    else:
        B = [costs.b_ns[s] + cpu[s] + (cpu[s - 1] if s > 0 else 0) for s in range(S)]
    U: list[float] = list(costs.u_ns)
    # per-action runtime costs (StageCosts.gap_ns / comm_ns / arrival_ns) folded into the
    # action they accompany: a forward's send/receive into F, a backward's into B (the event
    # engine places them exactly, and charges a receive's arrival only when it did not block;
    # here they only lengthen the stage)
    gap, com, arr = costs.gap_table(), costs.comm_table(), costs.arrival_table()
    if gap or com or arr:
        def oh(kind: str, s: int) -> int:
            return gap.get(kind, (0,) * S)[s] + com.get(kind, (0,) * S)[s] + arr.get(kind, (0,) * S)[s]

        for s in range(S):
            F[s] += oh("F", s) + (oh("SEND_F", s) if crosses[s] else 0) \
                + (oh("RECV_F", s) if s > 0 and crosses[s - 1] else 0)
            B[s] += oh("B", s)
            if not local:
                B[s] += (oh("SEND_B", s) if s > 0 and crosses[s - 1] else 0) \
                    + (oh("RECV_B", s) if crosses[s] else 0)
            U[s] += oh("U", s)
    busy = [0.0] * D
    for s in range(S):
        busy[dev[s]] += M * (F[s] + B[s] + loss[s]) + U[s]
    # channel work per batch (forward and, unless local, backward messages)
    chan: dict[tuple, float] = {}
    for s in range(S - 1):
        if not crosses[s]:
            continue
        pairs = [(dev[s], dev[s + 1])] + ([] if local else [(dev[s + 1], dev[s])])
        for src, dst in pairs:
            key = {"bus": ("bus",), "nic": ("nic", src)}.get(hw.topology, (src, dst))
            chan[key] = chan.get(key, 0.0) + M * ser[s]
    return _Pipe(S, M, F, B, U, loss, T, ser, lat, crosses, dev, busy, max(chan.values(), default=0.0))


def fast_iteration(sched: Schedule, costs: StageCosts, hw: SimHardware, *,
                   phases: Sequence[Phase] | None = None) -> FastResult:
    """Closed-form iteration time of ``sched`` (see the module doc).

    ``sched`` supplies the placement, micro-batching and the in-flight counts of
    its liveness pass (a short build of the same config is enough); ``phases``
    (default ``sched.phases``) the batch ranges of the whole run, each timed by
    its own schedule's closed form (:attr:`ScheduleSpec.fast_path`). With a steady
    state the iteration time is the last phase's; without one (the hybrid
    switch) it is the mean over the run.
    """
    phases = list(phases if phases is not None else sched.phases)
    if not phases:
        raise StalesimError("schedule: no batches to time")
    N = phases[-1].last
    if sched.data_parallel:
        parts = [(p, _data_parallel(get_spec(p.schedule).fast_path, costs, hw, sched.workers, p.batches))
                 for p in phases]
        main = parts[-1][1]
        before = sum(r.iteration_ns * p.batches for p, r in parts[:-1])
        return FastResult(main.iteration_ns, before + main.makespan_ns, main.busy_ns, main.formula,
                          main.terms)
    pipe = _pipe(sched, costs, hw)
    inflight = in_flight_per_stage(sched)
    timed = []
    for p in phases:
        spec = get_spec(p.schedule)
        if spec.fast_path == "flush":
            it, busy, terms = flush_replay(sched, costs, hw, batch=p.first)
            pipe.busy = busy
            timed.append((p, it, "flush", terms))
        else:
            timed.append((p, *_phase_time(spec, pipe, inflight)))
    if not sched.has_steady_state:
        total = 0.0
        terms = {}
        for p, it, kind, _t in timed:
            total += (p.batches + pipe.S - 1) * it if kind == "periodic" else p.batches * it
            terms[f"{p.schedule}_{p.first}_{p.last}_ns"] = it
        return FastResult(total / N, total, list(pipe.busy),
                          "phases: (n+S-1) periods of each pipelined phase + n batches of each "
                          "synchronous one, averaged over the run", terms)
    before = sum(p.batches * it for p, it, _, _ in timed[:-1])
    last, it, kind, terms = timed[-1]
    if kind == "periodic":
        fill = sum(pipe.F[s] + pipe.B[s] + pipe.loss[s] + pipe.U[s] for s in range(pipe.S)) + 2 * sum(pipe.T)
        return FastResult(it, before + last.batches * it + fill, list(pipe.busy),
                          "max-plus period: bottleneck device/channel work per batch "
                          "(and round trip / in-flight)", terms)
    formula = {"flush": "one flushed batch replayed exactly: largest device span",
               "fill-drain": "GPipe flow shop: sum p + (M-1) max p, fwd then bwd",
               "one-f-one-b": "1F1B: max-plus recurrence over one flush (uniform: (M+S-1)(F+B))",
               "critical-path": "sequential: critical path of one batch"}[kind]
    return FastResult(it, before + last.batches * it, list(pipe.busy), formula, terms)


def _phase_time(spec: ScheduleSpec, pipe: _Pipe, inflight: list[int]) -> tuple[float, str, dict[str, float]]:
    """(ns per batch, closed-form family, terms) of one phase's schedule."""
    kind = spec.fast_path
    P = pipe
    if kind == "periodic":
        round_trip = not spec.uses_micro and not spec.local_loss
        period, terms = _periodic(P.S, P.F, P.B, P.U, P.loss, P.T, P.busy, P.chan_max,
                                  inflight if round_trip else None)
        return period, kind, terms
    if kind == "fill-drain":
        it, terms = _gpipe(P.S, P.M, P.F, P.B, P.U, P.loss, P.T, P.ser, P.lat, P.crosses)
        return it, kind, terms
    if kind == "one-f-one-b":
        it, terms = _one_f_one_b(P.S, P.M, P.F, P.B, P.U, P.loss, P.ser, P.lat, P.crosses, P.dev)
        return it, kind, terms
    if kind == "critical-path":
        it, _ = _sequential(P.S, P.F, P.B, P.U, P.loss, P.T, P.dev)
        return it, kind, {}
    raise StalesimError(f"schedule: no fast path {kind!r} for a pipeline schedule")


def _periodic(S: int, F: list[float], B: list[float], U: list[float], loss: list[float], T: Sequence[float],
              busy: list[float], chan_max: float, inflight: list[int] | None) -> tuple[float, dict[str, float]]:
    """Bottleneck work per batch; with ``inflight`` (whole-batch pipelines whose
    backward crosses stages) also each stage's round trip over the batches it keeps
    in flight (the liveness pass's count: S - s for PipeDream, 2(S-1-s)+1 stale)."""
    period = max(max(busy), chan_max)
    terms = {"bottleneck_device_ns": max(busy), "bottleneck_channel_ns": chan_max}
    if inflight is not None:
        rt_max = 0.0
        for s in range(S):
            k = max(1, inflight[s])
            trip = sum(F[j] + B[j] + loss[j] for j in range(s, S)) + 2 * sum(T[s:S - 1]) + U[s]
            rt_max = max(rt_max, trip / k)
        terms["round_trip_ns"] = rt_max
        period = max(period, rt_max)
    return period, terms


def _sequential(S: int, F: list[float], B: list[float], U: list[float], loss: list[float], T: Sequence[float],
                dev: list[int]) -> tuple[float, list[float]]:
    off = [0.0] * S  # when F(s) starts within the batch
    t = 0.0
    for s in range(S):
        off[s] = t
        t += F[s] + loss[s] + (T[s] if s < S - 1 else 0)
    end_u = [0.0] * S
    for s in reversed(range(S)):
        t += B[s]
        end_u[s] = t + U[s]
        if s > 0:
            t += T[s - 1]
    # the next batch's F(s) must find device s free
    per_dev: dict[int, float] = {}
    for s in range(S):
        per_dev[dev[s]] = max(per_dev.get(dev[s], 0.0), end_u[s] - off[s])
    it = max(max(per_dev.values()), end_u[0])
    return it, end_u


def _one_f_one_b(S: int, M: int, F: list[float], B: list[float], U: list[float], loss: list[float],
                 ser: Sequence[float], lat: float, crosses: list[bool],
                 dev: list[int]) -> tuple[float, dict[str, float]]:
    """One flush of 1F1B evaluated exactly: each stage walks its 1F1B order
    (S-1-s warm-up forwards), an action starts when its stage is free and its
    input has arrived; channels are FIFO. O(S M), no events.

    Uniform stages on an ideal link give (M + S - 1)(F + B): the closed form.
    """
    from stalesim.schedule.orders import one_f_one_b

    orders = [list(one_f_one_b(M, S - 1 - s)) for s in range(S)]
    ptr = [0] * S
    clock = [0.0] * S
    f_arr = [[-1.0] * M for _ in range(S)]  # input activation of (s, m) available
    b_arr = [[-1.0] * M for _ in range(S)]  # output gradient of (s, m) available
    for m in range(M):
        f_arr[0][m] = 0.0
        b_arr[S - 1][m] = 0.0  # the loss stage makes its own gradient
    chan_f = [0.0] * S
    chan_b = [0.0] * S
    off = [-1.0] * S
    progress = True
    while progress:
        progress = False
        for s in range(S):
            while ptr[s] < len(orders[s]):
                kind, m = orders[s][ptr[s]]
                is_f = kind.value == "F"
                ready = f_arr[s][m] if is_f else b_arr[s][m]
                if ready < 0:
                    break
                if not is_f and s == S - 1:
                    ready = 0.0
                start = max(clock[s], ready)
                if is_f:
                    if off[s] < 0:
                        off[s] = start
                    end = start + F[s] + loss[s]
                    if s < S - 1:
                        if crosses[s]:
                            xs = max(chan_f[s], end)
                            chan_f[s] = xs + ser[s]
                            f_arr[s + 1][m] = xs + ser[s] + lat
                        else:
                            f_arr[s + 1][m] = end
                else:
                    end = start + B[s]
                    if s > 0:
                        if crosses[s - 1]:
                            xs = max(chan_b[s - 1], end)
                            chan_b[s - 1] = xs + ser[s - 1]
                            b_arr[s - 1][m] = xs + ser[s - 1] + lat
                        else:
                            b_arr[s - 1][m] = end
                clock[s] = end
                ptr[s] += 1
                progress = True
    if any(p < len(o) for p, o in zip(ptr, orders)):  # pragma: no cover - 1F1B never deadlocks
        raise StalesimError("1f1b fast path: stuck")
    end_u = [clock[s] + U[s] for s in range(S)]
    per_dev: dict[int, float] = {}
    for s in range(S):
        per_dev[dev[s]] = max(per_dev.get(dev[s], 0.0), end_u[s] - off[s])
    return max(per_dev.values()), {"flush_ns": max(end_u)}


def flush_replay(sched: Schedule, costs: StageCosts, hw: SimHardware, *,
                 batch: int = 0) -> tuple[float, list[float], dict[str, float]]:
    """One batch of ``sched`` evaluated exactly (see the module doc, ``flush``).

    Returns (largest device span, per-device busy time, terms). Only the actions of
    ``batch`` run, each device in its list order; a receive waits for its send's
    arrival (latency + bytes / bandwidth on a FIFO channel of the link topology);
    a transfer's core share (hardware without copy engines) is added on both ends.
    """
    from stalesim.schedule.actions import Kind
    from stalesim.schedule.deps import dependencies
    from stalesim.sim.events import _channel_index

    n_dev = sched.num_devices
    lists = [[a for a in acts if a.batch == batch] for acts in sched.device_actions]
    bi, bw = costs.split_ns()
    dur = {Kind.F: costs.f_ns, Kind.B: costs.b_ns, Kind.I: bi, Kind.W: bw, Kind.U: costs.u_ns}
    ser = [hw.serialize_ns(b) for b in costs.msg_bytes]
    lat = hw.latency_ns
    arrive: dict[tuple, float] = {}
    chan: dict[int, float] = {}
    clock = [0.0] * n_dev
    first = [-1.0] * n_dev
    busy = [0.0] * n_dev
    ptr = [0] * n_dev
    progress = True
    while progress:
        progress = False
        for d in range(n_dev):
            acts = lists[d]
            while ptr[d] < len(acts):
                a = acts[ptr[d]]
                k = a.kind
                start = clock[d]
                if k is Kind.RECV_F or k is Kind.RECV_B:
                    (dep,) = tuple(dependencies(sched, a))
                    arr = arrive.get(dep)
                    if arr is None:
                        break
                    seg = ser[dep[2]]
                    end = max(start, arr) + hw.cpu_ns(lat + seg)
                    busy[d] += hw.cpu_ns(lat + seg)
                elif k is Kind.SEND_F or k is Kind.SEND_B:
                    peer_stage = a.stage + 1 if k is Kind.SEND_F else a.stage - 1
                    dst = sched.device_of(peer_stage, a.worker)
                    ch = _channel_index(hw.topology, n_dev, d, dst)
                    xs = max(start, chan.get(ch, 0.0))
                    chan[ch] = xs + ser[a.stage]
                    arrive[a.key] = xs + ser[a.stage] + lat
                    occ = hw.cpu_ns(lat + ser[a.stage])
                    end = start + occ
                    busy[d] += occ
                else:
                    t = costs.loss_ns if k is Kind.LOSS else dur.get(k, (0,) * costs.stages)[a.stage]
                    if first[d] < 0 and t:
                        first[d] = start
                    end = start + t
                    busy[d] += t
                clock[d] = end
                ptr[d] += 1
                progress = True
    if any(p < len(acts) for p, acts in zip(ptr, lists)):  # pragma: no cover - validated IR
        raise StalesimError("flush fast path: the batch's order is stuck")
    spans = [clock[d] - first[d] if first[d] >= 0 else 0.0 for d in range(n_dev)]
    it = max(spans, default=0.0)
    return it, busy, {"largest_span_ns": it, "flush_makespan_ns": max(clock, default=0.0)}


def _flow(ps: list[float], delays: float, M: int) -> float:
    return sum(ps) + delays + (M - 1) * max(ps, default=0.0)


def _gpipe(S: int, M: int, F: list[float], B: list[float], U: list[float], loss: list[float], T: Sequence[float],
           ser: Sequence[float], lat: float, crosses: list[bool]) -> tuple[float, dict[str, float]]:
    # forward: machines stage 0, channel 0, stage 1, ..., stage S-1 (+ loss)
    ps: list[float] = []
    delays = 0.0
    off = [0.0] * S
    for s in range(S):
        off[s] = sum(ps) + delays  # first micro-batch reaches stage s (approximately)
        ps.append(F[s] + loss[s])
        if s < S - 1 and crosses[s]:
            ps.append(ser[s])
            delays += lat
    t_f = _flow(ps, delays, M)
    bps: list[float] = []
    bdel = 0.0
    end_u = [0.0] * S
    for s in reversed(range(S)):
        bps.append(B[s])
        end_u[s] = t_f + _flow(bps, bdel, M) + U[s]
        if s > 0 and crosses[s - 1]:
            bps.append(ser[s - 1])
            bdel += lat
    it = max(end_u[s] - off[s] for s in range(S))
    return it, {"forward_ns": t_f, "backward_ns": end_u[0] - t_f - U[0]}


def _data_parallel(kind: str, costs: StageCosts, hw: SimHardware, P: int, batches: int) -> FastResult:
    S = costs.stages
    F, B, U, L = list(costs.f_ns), list(costs.b_ns), list(costs.u_ns), costs.loss_ns
    gap, com = costs.gap_table(), costs.comm_table()
    if gap or com:  # per-action runtime costs, folded in (see _pipe)
        def oh(kind: str, s: int) -> int:
            return gap.get(kind, (0,) * S)[s] + com.get(kind, (0,) * S)[s]

        for s in range(S):
            F[s] += oh("F", s)
            B[s] += oh("B", s) + oh("AR", s)
            U[s] += oh("U", s) + oh("ARW", s)
        L += oh("LOSS", S - 1)
    ar = [hw.allreduce_ns(pb, P) if P > 1 else 0 for pb in costs.dp_bytes()]
    cpu_ar = [hw.cpu_ns(a) for a in ar]
    t_comp = sum(F) + L + sum(B)
    t_up = sum(U)
    t_comm = sum(ar)
    if kind == "overlapped-allreduce":
        it = max(t_comp + t_up + sum(cpu_ar), t_comm)
        return FastResult(it, batches * it, [t_comp + t_up + sum(cpu_ar)] * P,
                          "Pipe-SGD: max(T_comp + T_up, T_comm)",
                          {"t_comp_ns": t_comp, "t_update_ns": t_up, "t_comm_ns": t_comm,
                           "synchronous_ns": t_comp + t_up + t_comm})
    # dp: buckets all-reduced as backwards finish, FIFO ring, then updates
    t: float = sum(F) + L
    ring = 0.0
    done = [0.0] * S
    for s in reversed(range(S)):
        t += B[s]
        if P > 1:
            t += cpu_ar[s] if not hw.comm_overlaps_compute else 0
            start = max(ring, t - (cpu_ar[s] if not hw.comm_overlaps_compute else 0))
            ring = start + ar[s]
            done[s] = ring
        else:
            done[s] = t
    for s in reversed(range(S)):
        t = max(t, done[s]) + U[s]
    return FastResult(t, batches * t, [t_comp + t_up + sum(cpu_ar)] * P,
                      "dp: bucketed ring all-reduce overlapping the backward, then updates",
                      {"t_comp_ns": t_comp, "t_update_ns": t_up, "t_comm_ns": t_comm,
                       "synchronous_ns": t_comp + t_up + t_comm})
