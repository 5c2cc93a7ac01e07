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

from dataclasses import dataclass, field
from functools import lru_cache

import simpy

from stalesim.errors import StalesimError
from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED, TRANSFER_KINDS, TRANSFER_NAMES_ORDERED, Action, Kind
from stalesim.schedule.deps import dependencies
from stalesim.schedule.ir import Schedule, ScheduleConfig
from stalesim.sim.model import SimHardware, StageCosts

# op codes
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
                     workers: int | None = None, comm: CommPlan | None = None) -> Timeline:
    """Run the event simulation of a compiled schedule with these costs (``comm``:
    the cluster's nodes, groups and buckets; None = one node, one ring)."""
    sched = prog.sched
    S = sched.stages
    if costs.stages != S:
        raise StalesimError(f"stages: costs for {costs.stages} stages, schedule has {S}")
    P = workers or sched.workers
    n_dev = sched.num_devices
    n = prog.n_actions
    env = simpy.Environment()
    start = [0] * n
    end = [-1] * n
    arrive = [-1] * n
    xfer: dict[int, tuple[int, int]] = {}
    waiters: dict[int, simpy.Event] = {}
    core_free = [0] * n_dev
    chan_free = [0] * (n_dev * n_dev)
    cpu_jobs: list[tuple[int, int, int, int]] = []
    coll_count = [0] * prog.n_colls
    coll_done = [-1] * prog.n_colls
    coll_start = [-1] * prog.n_colls
    coll_ev: list[simpy.Event | None] = [None] * prog.n_colls
    bi, bw = costs.split_ns()
    dur_table = [list(costs.f_ns), list(costs.b_ns), list(costs.u_ns), [costs.loss_ns] * S,
                 list(bi), list(bw)]
    # per-action runtime costs (StageCosts.gap_ns / comm_ns): [op][kind code][stage]
    gaps, cpu = _op_tables(costs.gap_table(), S), _op_tables(costs.comm_table(), S)
    has_gap = any(v for op in gaps for row in op for v in row)
    wake = hw.wake_ns
    msg_ser = [hw.serialize_ns(b) for b in costs.msg_bytes]
    lat = hw.latency_ns
    if comm is None:
        ar_buckets: list[tuple[int, ...]] = [(hw.allreduce_ns(pb, P),) for pb in costs.dp_bytes()]
        ar_ring: list[int] | tuple[int, ...] = [0] * S
        members = P
        node_of: tuple[int, ...] | None = None
        inter_ser: tuple[int, ...] = ()
        inter_lat = 0
    else:
        ar_buckets, ar_ring, members = list(comm.ar_buckets), comm.ar_ring, comm.members
        node_of, inter_ser, inter_lat = comm.node_of, comm.inter_ser, comm.inter_latency_ns
    ring = [0] * (max(ar_ring, default=0) + 1)
    coll_ready: list[list[int] | None] = [None] * prog.n_colls
    shares_core = (not hw.comm_overlaps_compute) and hw.cpu_comm_occupancy > 0
    occ = hw.cpu_comm_occupancy
    topo = hw.topology
    timeout = env.timeout
    dev_of = prog.device_of_gid

    def queue_cpu(devices: tuple[int, ...] | list[int], t: int, ns: int, gid: int) -> None:
        for dd in devices:
            s0 = max(t, core_free[dd])
            core_free[dd] = s0 + ns
            cpu_jobs.append((dd, s0, s0 + ns, gid))

    def later_cpu(devices, t: int, ns: int, gid: int) -> None:
        ev = timeout(t - env.now)
        ev.callbacks.append(lambda _e: queue_cpu(devices, t, ns, gid))

    busy = [0] * n_dev

    def device(d: int, ops: list[tuple[int, int, int, int, int]]):
        # ``now`` mirrors env.now: it is updated after every yield (timeouts
        # resume at ``clock``, events carry the time at which they fired).
        clock = now = 0
        work = 0
        last = 0  # duration of the latest compute action (the backward before an AR)
        durs = dur_table
        for op, gid, kc, s, ref in ops:
            if op == 0:  # COMPUTE: no other device observes it, no event needed
                dur = durs[kc][s]
                g = gaps[0][kc][s] if has_gap else 0
                if shares_core:
                    if clock > now:
                        yield timeout(clock - now)
                        now = clock
                    clock = max(clock, core_free[d])
                    core_free[d] = clock + dur + g
                start[gid] = clock
                clock += dur
                end[gid] = clock
                clock += g
                work += dur
                last = dur
                continue
            if clock > now:  # sync before anything other devices can see
                yield timeout(clock - now)
                now = clock
            if op == 2:  # RECV
                arr = arrive[ref]
                t0 = start[gid] = now
                if arr < 0:
                    ev = waiters.get(ref)
                    if ev is None:
                        ev = waiters[ref] = env.event()
                    now = yield ev
                    arr = arrive[ref]
                if arr > now:
                    yield timeout(arr - now)
                    now = arr
                # blocked: resumes ``wake`` after the arrival; then completes (CPU)
                t = now + wake if arr > t0 else now
                end[gid] = t + cpu[2][kc][s]
                clock = end[gid] + gaps[2][kc][s]
            elif op == 1:  # SEND
                if node_of is not None and node_of[d] != node_of[ref]:
                    ser, arr = inter_ser[s], inter_lat  # between nodes: the network link
                else:
                    ser, arr = msg_ser[s], lat
                ch = _channel_index(topo, n_dev, d, ref)
                posted = now + cpu[1][kc][s]  # the message leaves once posted
                xs = max(posted, chan_free[ch])
                chan_free[ch] = xs + ser
                arr += xs + ser
                arrive[gid] = arr
                xfer[gid] = (xs, arr)
                start[gid] = now
                end[gid] = posted
                clock = posted + gaps[1][kc][s]
                ev = waiters.pop(gid, None)
                if ev is not None:
                    ev.succeed(now)
                if shares_core and arr > xs:
                    ns = round(occ * (arr - xs))
                    if ns:
                        (queue_cpu if xs == now else later_cpu)((d, ref), xs, ns, gid)
            elif op == 3:  # AR: non-blocking start of a collective
                start[gid] = now
                issued = end[gid] = now + cpu[3][0][s]  # packing and starting take the core
                clock = issued + gaps[3][0][s]
                coll_count[ref] += 1
                buckets = ar_buckets[s]
                K = len(buckets)
                ready = [issued - ((K - 1 - j) * last) // K for j in range(K)] if K > 1 else [issued]
                seen = coll_ready[ref]
                if seen is not None:
                    ready = [a if a > b else b for a, b in zip(ready, seen)]
                coll_ready[ref] = ready
                if coll_count[ref] == members:
                    rk = ar_ring[s]
                    done = ring[rk]
                    cs = -1
                    for j in range(K):  # FIFO on the group's ring, each bucket once ready
                        st = done if done > ready[j] else ready[j]
                        if cs < 0:
                            cs = st
                        done = st + buckets[j]
                    ring[rk] = done
                    coll_start[ref] = cs
                    coll_done[ref] = done
                    ev = coll_ev[ref]
                    if ev is not None:
                        ev.succeed(now)
                    if shares_core and done > cs:
                        ns = round(occ * (done - cs))
                        if ns:
                            devs = [sched.device_of(s, w) for w in range(sched.workers)]
                            t0 = cs if cs > now else now
                            (queue_cpu if t0 == now else later_cpu)(devs, t0, ns, gid)
            else:  # ARW: wait for the collective
                t0 = start[gid] = now
                done = coll_done[ref]
                if done < 0:
                    ev = coll_ev[ref]
                    if ev is None:
                        ev = coll_ev[ref] = env.event()
                    now = yield ev
                    done = coll_done[ref]
                if done > now:
                    yield timeout(done - now)
                    now = done
                t = now + wake if done > t0 else now
                end[gid] = t + cpu[4][0][s]
                clock = end[gid] + gaps[4][0][s]
        if clock > now:
            yield timeout(clock - now)
        busy[d] += work

    for d, ops in enumerate(prog.ops):
        if ops:
            env.process(device(d, ops))
    env.run()
    if min(end, default=0) < 0:
        stuck = sorted({dev_of[g] for g in range(n) if end[g] < 0})
        raise StalesimError(f"simulation deadlocked on devices {stuck}")  # validated IR: unreachable
    for dd, s0, e0, _ in cpu_jobs:
        busy[dd] += e0 - s0
    makespan = max(int(env.now), max(end, default=0),
                   max((e for _, _, e, _ in cpu_jobs), default=0))
    batch_done = [max(end[g] for g in gids) if gids else 0 for gids in prog.u_gids_by_batch]
    coll_span = list(zip(coll_start, coll_done))
    return Timeline(prog, start, end, xfer, coll_span, cpu_jobs, makespan, batch_done, busy)


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
