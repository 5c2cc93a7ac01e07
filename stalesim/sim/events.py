"""Event simulation: SimPy processes replay each device's action list from the IR.

No schedule logic lives here. Each device is a SimPy process that walks its
lowered action list in order; an action starts when the device has finished
the previous one and its dependencies (``stalesim.schedule.deps.dependencies``,
the single definition of the IR's semantics) are met, and holds its resources:

* **compute** (one per device): F, B, I, W, U and LOSS hold it for their duration
  (I and W: the split backward's halves, :meth:`StageCosts.split_ns`);
  on hardware without copy engines a transfer also takes ``occupancy x T`` of
  the core on both ends, queued FIFO on the core when the transfer starts;
* **channels** (links, see :class:`~stalesim.sim.model.SimHardware` for the
  topologies): a message holds its channel for bytes / bandwidth and arrives
  latency later; channels are FIFO;
* the **ring** for all-reduces: a collective starts when every worker has
  issued its ``AR`` and the ring is free, and lasts the ring (or tree) formula.
  A :class:`CommPlan` (cluster runs, :mod:`stalesim.sim.cluster`) adds nodes
  (a send between nodes uses the network link), one ring per all-reduce group,
  group durations from the hierarchical model, and gradient buckets that become
  ready during the last backward (DDP-style overlap).

Speed. The SimPy environment is the clock, but events are created only where
devices interact. Compile time keeps, per action, only the dependencies on
*other* devices (a same-device dependency is earlier in the list, hence done);
after lowering those are exactly RECV -> SEND and ARW -> all-reduce done.
Compute actions therefore have no cross-device observers, so a run of them is
one ``env.timeout`` (their start/end times are recorded exactly); the device
synchronises its clock with SimPy before anything another device can observe
or disturb (a send, an all-reduce start, a receive, and, when a transfer can
steal the core, every compute action). Resources are requested at the SimPy
time at which they are requested, in SimPy's event order, and granted FIFO;
for fixed holding times that is exactly a ``simpy.Resource(capacity=1)``,
kept as a "free at" integer per resource (tested against simpy.Resource).
Durations come from a per-(kind, stage) table filled once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import simpy

from stalesim.errors import StalesimError
from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED, TRANSFER_KINDS, TRANSFER_NAMES_ORDERED, Action, Kind
from stalesim.schedule.deps import dependencies
from stalesim.schedule.ir import Schedule, ScheduleConfig
from stalesim.sim.jitter import ActionJitter
from stalesim.sim.model import SimHardware, StageCosts

# op codes (the engine's dispatch; also the first index of the per-op cost tables)
COMPUTE, SEND, RECV, AR, ARW = 0, 1, 2, 3, 4
# a compute action's kind code: its position in the ordered compute kinds (the cost tables' order)
_KIND_CODE = {Kind(k): i for i, k in enumerate(COMPUTE_NAMES_ORDERED)}


@dataclass
class Program:
    """A schedule compiled once for the engine (independent of costs and hardware).

    ``ops[d]``: per device, tuples ``(op, gid, kind_code, stage, ref)`` where
    ``ref`` is the SEND's peer device (SEND), the SEND's gid (RECV) or the
    collective index (AR/ARW).
    """

    sched: Schedule
    actions: list[Action]  # by gid
    device_of_gid: list[int]
    ops: list[list[tuple[int, int, int, int, int]]]
    n_colls: int
    coll_stage: list[int]
    u_gids_by_batch: list[list[int]]
    send_to_recv: dict[int, int] = field(default_factory=dict)

    @property
    def n_actions(self) -> int:
        return len(self.actions)


def compile_schedule(sched: Schedule) -> Program:
    """Index the actions, keep cross-device dependencies, map sends/receives/collectives."""
    if not sched.lowered:
        raise StalesimError("schedule: the simulator needs a lowered schedule (use build_schedule)")
    gid_of: dict[tuple, int] = {}
    actions: list[Action] = []
    dev_of: list[int] = []
    for d, acts in enumerate(sched.device_actions):
        for a in acts:
            gid_of[a.key] = len(actions)
            actions.append(a)
            dev_of.append(d)
    colls: dict[tuple[int, int], int] = {}
    coll_stage: list[int] = []
    ops: list[list[tuple[int, int, int, int, int]]] = []
    u_by_batch: list[list[int]] = [[] for _ in range(sched.batches)]
    send_to_recv: dict[int, int] = {}
    for d, acts in enumerate(sched.device_actions):
        dev_ops = []
        for a in acts:
            gid = gid_of[a.key]
            k = a.kind
            if k in _KIND_CODE:
                # all dependencies of compute actions are on this device after lowering
                for dep in dependencies(sched, a):
                    g = gid_of.get(dep)
                    if g is None or dev_of[g] != d:
                        raise StalesimError(f"action {a}: dependency {dep} is not on device {d}")
                dev_ops.append((COMPUTE, gid, _KIND_CODE[k], a.stage, 0))
                if k is Kind.U:
                    u_by_batch[a.batch].append(gid)
            elif k is Kind.SEND_F or k is Kind.SEND_B:
                peer_stage = a.stage + 1 if k is Kind.SEND_F else a.stage - 1
                dev_ops.append((SEND, gid, 0 if k is Kind.SEND_F else 1, a.stage,
                                sched.device_of(peer_stage, a.worker)))
            elif k is Kind.RECV_F or k is Kind.RECV_B:
                (dep,) = tuple(dependencies(sched, a))
                sg = gid_of[dep]
                send_to_recv[sg] = gid
                dev_ops.append((RECV, gid, 0 if k is Kind.RECV_F else 1, a.stage, sg))
            elif k is Kind.AR or k is Kind.ARW:
                c = colls.get((a.stage, a.batch))
                if c is None:
                    c = colls[(a.stage, a.batch)] = len(coll_stage)
                    coll_stage.append(a.stage)
                dev_ops.append((AR if k is Kind.AR else ARW, gid, 0, a.stage, c))
            else:  # pragma: no cover - every Kind is handled above
                raise StalesimError(f"action {a}: unknown kind")
        ops.append(dev_ops)
    return Program(sched, actions, dev_of, ops, len(coll_stage), coll_stage, u_by_batch,
                   send_to_recv)


@dataclass(frozen=True)
class CommPlan:
    """How a cluster run communicates (built by :mod:`stalesim.sim.cluster`).

    ``node_of[d]``: the node of program device d; a send between nodes holds its
    channel ``inter_ser[stage]`` and arrives ``inter_latency_ns`` later (the
    hardware's own link inside a node). ``ar_buckets[stage]``: the all-reduce time
    of each gradient bucket of the stage, in the order the backward produces them;
    bucket j of K is ready ``(K-1-j)/K`` of the last backward before the ``AR``
    (the gradients of a stage's layers appear uniformly over its backward, last
    layer first), the last one at the ``AR``. ``ar_ring[stage]``: the FIFO
    collective channel of the stage's group (groups on disjoint devices do not
    contend). ``members``: the ``AR`` starts that complete a collective, i.e. the
    workers present in the program (one representative per distinct replica).
    """

    node_of: tuple[int, ...]
    inter_ser: tuple[int, ...]
    inter_latency_ns: int
    ar_buckets: tuple[tuple[int, ...], ...]
    ar_ring: tuple[int, ...]
    members: int


@lru_cache(maxsize=64)
def program_for(cfg: ScheduleConfig) -> Program:
    """Build and compile the schedule of ``cfg``, cached per process (sweeps reuse it)."""
    from stalesim.schedule import build_schedule

    return compile_schedule(build_schedule(cfg))


@lru_cache(maxsize=256)
def schedule_for(cfg: ScheduleConfig) -> Schedule:
    """The schedule of ``cfg``, built once per process and shape (fast path, sweeps)."""
    from stalesim.schedule import build_schedule

    return build_schedule(cfg)


@dataclass
class Timeline:
    """What one event simulation produced (integer ns)."""

    program: Program
    start: list[int]
    end: list[int]
    xfer: dict[int, tuple[int, int]]  # SEND gid -> (transfer start, arrival)
    coll_span: list[tuple[int, int]]  # per collective: (start, done)
    cpu_jobs: list[tuple[int, int, int, int]]  # (device, start, end, gid of the transfer/AR)
    makespan: int
    batch_done: list[int]  # per batch: end of its last update
    compute_busy: list[int]  # per device, whole run


def _channel_index(topology: str, n_dev: int, src: int, dst: int) -> int:
    if topology == "bus":
        return 0
    if topology == "nic":
        return src
    return src * n_dev + dst


def simulate_program(prog: Program, costs: StageCosts, hw: SimHardware, *,
                     workers: int | None = None, comm: CommPlan | None = None,
                     jitter: ActionJitter | None = None) -> Timeline:
    """Run the event simulation of a compiled schedule with these costs (``comm``:
    the cluster's nodes, groups and buckets; None = one node, one ring; ``jitter``: every
    compute action's duration times one draw of its kind's spread, :mod:`stalesim.sim.jitter`)."""
    sched = prog.sched
    if costs.stages != sched.stages:
        raise StalesimError(f"stages: costs for {costs.stages} stages, schedule has {sched.stages}")
    eng = _Engine(prog, costs, hw, workers or sched.workers, comm, jitter)
    for d, ops in enumerate(prog.ops):
        if ops:
            eng.env.process(eng.device(d, ops))
    eng.env.run()
    return eng.timeline()


class _Engine:
    """The state of one event simulation and one function per communication op code.

    ``device`` walks a device's ops, runs compute actions itself (the hot path) and
    hands every other op to its op's function (made by ``send_op``, ``recv_op``,
    ``start_allreduce_op``, ``wait_allreduce_op``), which reads and writes the shared per-action arrays
    (``start``, ``end``, ``arrive``) and the resources' "free at" times. Only RECV and
    ARW can block: their functions return -1 while the device must wait, and
    ``until_arrival`` / ``until_collective`` give the event to wait on; every op
    function returns the device's new clock. ``now`` (a device's SimPy time)
    and ``clock`` (its own, possibly ahead) are passed in and out rather than stored:
    they are per device, the engine is shared.
    """

    def __init__(self, prog: Program, costs: StageCosts, hw: SimHardware, P: int,
                 comm: CommPlan | None, jitter: ActionJitter | None = None) -> None:
        sched = self.sched = prog.sched
        S = sched.stages
        self.prog = prog
        n_dev = self.n_dev = sched.num_devices
        n = prog.n_actions
        self.env = simpy.Environment()
        self.timeout = self.env.timeout
        self.start = [0] * n
        self.end = [-1] * n
        self.arrive = [-1] * n
        self.xfer: dict[int, tuple[int, int]] = {}
        self.waiters: dict[int, simpy.Event] = {}
        self.core_free = [0] * n_dev
        self.chan_free = [0] * (n_dev * n_dev)
        self.cpu_jobs: list[tuple[int, int, int, int]] = []
        self.busy = [0] * n_dev
        self.last_dur = [0] * n_dev  # duration of the latest compute action (the backward before an AR)
        nc = prog.n_colls
        self.coll_count = [0] * nc
        self.coll_done = [-1] * nc
        self.coll_start = [-1] * nc
        self.coll_ev: list[simpy.Event | None] = [None] * nc
        self.coll_ready: list[list[int] | None] = [None] * nc
        bi, bw = costs.split_ns()
        # durations by [kind code][stage]
        self.dur_table = [list(costs.f_ns), list(costs.b_ns), list(costs.u_ns), [costs.loss_ns] * S,
                          list(bi), list(bw)]
        # per action id, the factor its duration is drawn with (None: every action its mean)
        self.factor = None if jitter is None or not jitter.ratios else jitter.factors(prog)
        # per-action runtime costs (StageCosts.gap_ns / comm_ns): [op][kind code][stage]
        self.gaps, self.cpu = _op_tables(costs.gap_table(), S), _op_tables(costs.comm_table(), S)
        self.arrival = _op_tables(costs.arrival_table(), S)[RECV]
        self.has_gap = any(v for op in self.gaps for row in op for v in row)
        self.wake = hw.wake_ns
        self.msg_ser = [hw.serialize_ns(b) for b in costs.msg_bytes]
        self.lat = hw.latency_ns
        self.topo = hw.topology
        if comm is None:
            self.ar_buckets: list[tuple[int, ...]] = [(hw.allreduce_ns(pb, P),) for pb in costs.dp_bytes()]
            self.ar_ring: list[int] | tuple[int, ...] = [0] * S
            self.members = P
            self.node_of: tuple[int, ...] | None = None
            self.inter_ser: tuple[int, ...] = ()
            self.inter_lat = 0
        else:
            self.ar_buckets, self.ar_ring, self.members = list(comm.ar_buckets), comm.ar_ring, comm.members
            self.node_of, self.inter_ser, self.inter_lat = comm.node_of, comm.inter_ser, comm.inter_latency_ns
        self.ring = [0] * (max(self.ar_ring, default=0) + 1)
        self.shares_core = (not hw.comm_overlaps_compute) and hw.cpu_comm_occupancy > 0
        self.occ = hw.cpu_comm_occupancy
        # in op-code order: SEND, RECV, AR, ARW (compute is in the device loop)
        self.handlers = (self.send_op(), self.recv_op(), self.start_allreduce_op(),
                         self.wait_allreduce_op())

    # ------------------------------------------------------------ the device process
    def device(self, d: int, ops: list[tuple[int, int, int, int, int]]) -> Generator[simpy.Event, Any, None]:
        """One device's SimPy process: its ops in order, each but compute handed to its op's function."""
        # ``now`` mirrors env.now: it is updated after every yield (timeouts
        # resume at ``clock``, events carry the time at which they fired).
        clock = now = 0
        timeout = self.timeout
        shares_core = self.shares_core
        send, recv, start_allreduce, wait_allreduce = self.handlers
        until_arrival, until_collective = self.until_arrival, self.until_collective
        compute_code, send_code, recv_code, ar_code = COMPUTE, SEND, RECV, AR  # locals: read per action
        durs, gaps, has_gap = self.dur_table, self.gaps[COMPUTE], self.has_gap
        core_free, start, end, last_dur = self.core_free, self.start, self.end, self.last_dur
        factor = self.factor
        work = 0
        for op, gid, kc, s, ref in ops:
            if op == compute_code:  # no other device observes it, no event needed ...
                if shares_core and clock > now:  # ... unless a transfer can take the core
                    yield timeout(clock - now)
                    now = clock
                # F, B, I, W, U, LOSS hold the core for their duration. The one op kept in
                # the loop: a call per compute action made the engine ~5% slower (bench_sim)
                dur = durs[kc][s] if factor is None else round(durs[kc][s] * factor[gid])
                g = gaps[kc][s] if has_gap else 0
                if shares_core:
                    clock = max(clock, core_free[d])
                    core_free[d] = clock + dur + g
                start[gid] = clock
                clock += dur
                end[gid] = clock
                clock += g
                work += dur
                last_dur[d] = dur  # the backward before an AR, whose gradients fill the buckets
                continue
            if clock > now:  # sync before anything other devices can see
                yield timeout(clock - now)
                now = clock
            if op == recv_code:
                t0 = now
                while (clock := recv(gid, kc, s, ref, t0, now)) < 0:
                    now = yield until_arrival(ref, now)
            elif op == send_code:
                clock = send(d, gid, kc, s, ref, now)
            elif op == ar_code:
                clock = start_allreduce(d, gid, s, ref, now)
            else:  # ARW
                t0 = now
                while (clock := wait_allreduce(gid, s, ref, t0, now)) < 0:
                    now = yield until_collective(ref, now)
        if clock > now:
            yield timeout(clock - now)
        self.busy[d] += work

    # ------------------------------------------------------------ one function per op
    # Each ``*_op`` method returns its op's function with the engine's tables bound as
    # closure variables: the functions run once per action, and a closure variable is
    # read faster than an attribute (bench_sim, docs/simulator.md).
    def send_op(self) -> Callable[[int, int, int, int, int, int], int]:
        """SEND to device ``ref``: post, hold the channel, wake a waiting receiver; the new clock."""
        node_of, inter_ser, inter_lat = self.node_of, self.inter_ser, self.inter_lat
        msg_ser, lat = self.msg_ser, self.lat
        topo, n_dev, cpu, gaps = self.topo, self.n_dev, self.cpu[SEND], self.gaps[SEND]
        chan_free, arrive, xfer, start, end = self.chan_free, self.arrive, self.xfer, self.start, self.end
        waiters, shares_core, occ, steal_core = self.waiters, self.shares_core, self.occ, self._steal_core

        def send(d: int, gid: int, kc: int, s: int, ref: int, now: int) -> int:
            if node_of is not None and node_of[d] != node_of[ref]:
                ser, arr = inter_ser[s], inter_lat  # between nodes: the network link
            else:
                ser, arr = msg_ser[s], lat
            ch = _channel_index(topo, n_dev, d, ref)
            posted = now + cpu[kc][s]  # the message leaves once posted
            xs = max(posted, chan_free[ch])
            chan_free[ch] = xs + ser
            arr += xs + ser
            arrive[gid] = arr
            xfer[gid] = (xs, arr)
            start[gid] = now
            end[gid] = posted
            ev = waiters.pop(gid, None)
            if ev is not None:
                ev.succeed(now)
            if shares_core and arr > xs:
                ns = round(occ * (arr - xs))
                if ns:
                    steal_core((d, ref), xs, ns, gid, now)
            return posted + gaps[kc][s]
        return send

    def recv_op(self) -> Callable[[int, int, int, int, int, int], int]:
        """RECV of the SEND ``ref``, begun at ``t0``: once the message is there at ``now``,
        wake (if it blocked) and complete; returns the new clock, or -1: not yet
        (the device yields :meth:`until_arrival` and asks again)."""
        arrive, start, end, wake = self.arrive, self.start, self.end, self.wake
        cpu, gaps, arrival = self.cpu[RECV], self.gaps[RECV], self.arrival

        def recv(gid: int, kc: int, s: int, ref: int, t0: int, now: int) -> int:
            arr = arrive[ref]
            if arr < 0 or arr > now:
                return -1
            start[gid] = t0
            # blocked: resumes ``wake`` after the arrival; not blocked: the message came while
            # the device computed and took ``arrival`` of its core; then completes (CPU)
            t = now + wake if arr > t0 else now + arrival[kc][s]
            e = end[gid] = t + cpu[kc][s]
            return e + gaps[kc][s]
        return recv

    def until_arrival(self, ref: int, now: int) -> simpy.Event:
        """The event a receiver of SEND ``ref`` waits on: its send (unknown arrival) or its
        arrival; either resumes the receiver with the SimPy time."""
        arr = self.arrive[ref]
        if arr >= 0:
            return self.timeout(arr - now, arr)
        ev = self.waiters.get(ref)
        if ev is None:
            ev = self.waiters[ref] = self.env.event()
        return ev

    def start_allreduce_op(self) -> Callable[[int, int, int, int, int], int]:
        """AR: non-blocking start of collective ``ref``; the last member to start it runs it."""
        start, end, cpu, gaps, ar_buckets = self.start, self.end, self.cpu[AR][0], self.gaps[AR][0], self.ar_buckets
        coll_count, coll_ready, last_dur, members = self.coll_count, self.coll_ready, self.last_dur, self.members
        run_collective = self._run_collective

        def start_allreduce(d: int, gid: int, s: int, ref: int, now: int) -> int:
            start[gid] = now
            issued = end[gid] = now + cpu[s]  # packing and starting take the core
            coll_count[ref] += 1
            K = len(ar_buckets[s])
            last = last_dur[d]  # the backward before the AR, whose gradients fill the buckets
            ready = [issued - ((K - 1 - j) * last) // K for j in range(K)] if K > 1 else [issued]
            seen = coll_ready[ref]
            if seen is not None:
                ready = [a if a > b else b for a, b in zip(ready, seen)]
            coll_ready[ref] = ready
            if coll_count[ref] == members:
                run_collective(gid, s, ref, ready, now)
            return issued + gaps[s]
        return start_allreduce

    def _run_collective(self, gid: int, s: int, ref: int, ready: list[int], now: int) -> None:
        """Every member has started collective ``ref``: its buckets take the group's ring."""
        buckets = self.ar_buckets[s]
        rk = self.ar_ring[s]
        done = self.ring[rk]
        cs = -1
        for j in range(len(buckets)):  # FIFO on the group's ring, each bucket once ready
            st = done if done > ready[j] else ready[j]
            if cs < 0:
                cs = st
            done = st + buckets[j]
        self.ring[rk] = done
        self.coll_start[ref] = cs
        self.coll_done[ref] = done
        ev = self.coll_ev[ref]
        if ev is not None:
            ev.succeed(now)
        if self.shares_core and done > cs:
            ns = round(self.occ * (done - cs))
            if ns:
                sched = self.sched
                devs = [sched.device_of(s, w) for w in range(sched.workers)]
                self._steal_core(devs, cs if cs > now else now, ns, gid, now)

    def wait_allreduce_op(self) -> Callable[[int, int, int, int, int], int]:
        """ARW of collective ``ref``, begun at ``t0``: once the collective is done at ``now``,
        wake (if it blocked) and complete; returns the new clock, or -1: not yet
        (the device yields :meth:`until_collective` and asks again)."""
        coll_done, start, end, wake = self.coll_done, self.start, self.end, self.wake
        cpu, gaps = self.cpu[ARW][0], self.gaps[ARW][0]

        def wait_allreduce(gid: int, s: int, ref: int, t0: int, now: int) -> int:
            done = coll_done[ref]
            if done < 0 or done > now:
                return -1
            start[gid] = t0
            t = now + wake if done > t0 else now
            e = end[gid] = t + cpu[s]
            return e + gaps[s]
        return wait_allreduce

    def until_collective(self, ref: int, now: int) -> simpy.Event:
        """The event an ARW of collective ``ref`` waits on: its last start (end unknown) or its end."""
        done = self.coll_done[ref]
        if done >= 0:
            return self.timeout(done - now, done)
        ev = self.coll_ev[ref]
        if ev is None:
            ev = self.coll_ev[ref] = self.env.event()
        return ev

    # ------------------------------------------------------------ the core as a resource
    def _steal_core(self, devices: tuple[int, ...] | list[int], t: int, ns: int, gid: int, now: int) -> None:
        """A transfer takes ``ns`` of each device's core from ``t``: queued now or when t comes."""
        if t == now:
            self._queue_cpu(devices, t, ns, gid)
        else:
            ev = self.timeout(t - self.env.now)
            ev.callbacks.append(lambda _e: self._queue_cpu(devices, t, ns, gid))

    def _queue_cpu(self, devices: tuple[int, ...] | list[int], t: int, ns: int, gid: int) -> None:
        core_free = self.core_free
        for dd in devices:
            s0 = max(t, core_free[dd])
            core_free[dd] = s0 + ns
            self.cpu_jobs.append((dd, s0, s0 + ns, gid))

    # ------------------------------------------------------------ the result
    def timeline(self) -> Timeline:
        """The Timeline of the finished run (raises if a device never finished)."""
        prog, end, busy, cpu_jobs = self.prog, self.end, self.busy, self.cpu_jobs
        if min(end, default=0) < 0:
            dev_of = prog.device_of_gid
            stuck = sorted({dev_of[g] for g in range(prog.n_actions) if end[g] < 0})
            raise StalesimError(f"simulation deadlocked on devices {stuck}")  # validated IR: unreachable
        for dd, s0, e0, _ in cpu_jobs:
            busy[dd] += e0 - s0
        makespan = max(int(self.env.now), max(end, default=0),
                       max((e for _, _, e, _ in cpu_jobs), default=0))
        batch_done = [max(end[g] for g in gids) if gids else 0 for gids in prog.u_gids_by_batch]
        coll_span = list(zip(self.coll_start, self.coll_done))
        return Timeline(prog, self.start, end, self.xfer, coll_span, cpu_jobs, makespan, batch_done, busy)


# per op (compute, send, receive, all-reduce start, wait), the kinds its kind codes stand
# for, in code order: compute as _KIND_CODE, a send or receive 0 forward / 1 backward
_OP_KINDS = (COMPUTE_NAMES_ORDERED, TRANSFER_NAMES_ORDERED[0:2], TRANSFER_NAMES_ORDERED[2:4],
             TRANSFER_NAMES_ORDERED[4:5], TRANSFER_NAMES_ORDERED[5:6])


def _op_tables(table: dict[str, tuple[int, ...]], S: int) -> list[list[list[int]]]:
    """{kind: per-stage ns} -> [op][kind code][stage] (zeros where a kind is not given)."""
    return [[list(table.get(k, (0,) * S)) for k in kinds] for kinds in _OP_KINDS]


def busy_in_window(tl: Timeline, lo: int, hi: int) -> list[int]:
    """Per device, compute-resource busy time inside [lo, hi] (ns)."""
    prog = tl.program
    busy = [0] * prog.sched.num_devices
    dev_of = prog.device_of_gid
    start, end = tl.start, tl.end
    for gid, a in enumerate(prog.actions):
        if a.kind in TRANSFER_KINDS:
            continue
        s0, e0 = start[gid], end[gid]
        if e0 <= lo or s0 >= hi or e0 == s0:
            continue
        busy[dev_of[gid]] += min(e0, hi) - max(s0, lo)
    for dd, s0, e0, _ in tl.cpu_jobs:
        if e0 > lo and s0 < hi:
            busy[dd] += min(e0, hi) - max(s0, lo)
    return busy
