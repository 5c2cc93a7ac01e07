"""Cluster-scale simulation: P data-parallel replicas of a pipeline on nodes, by symmetry.

``simulate()`` comes here when a run has data-parallel replicas of a pipeline
schedule (``SimOptions.replicas`` > 1) or a cluster (hardware with nodes). The
full problem is the event simulation of P x D devices over N batches; two
symmetries make it small without changing the answer:

1. **Identical replicas** (:mod:`stalesim.sim.cluster`): one representative per
   replica class (usually one) is simulated; every collective completes from
   the representatives' ``AR`` starts with the duration of the whole group
   (hierarchical all-reduce over the group's nodes).
2. **Identical periods** (:mod:`stalesim.sim.periodic`): a run of n << N batches
   (the schedule's default simulation length, doubled until a period is found)
   is extrapolated to N batches.

``SimOptions(symmetry=False)`` simulates every replica and every batch instead
(the reference the tests compare against; affordable for small P, S, M, N).
Both go through the same engine, the same :class:`~stalesim.sim.events.CommPlan`
and the same result assembly, so they agree to the nanosecond.

Data-parallel schedules (``dp``, ``pipe-sgd``) are already replicas (``workers``):
on a cluster their P workers sit on nodes of G devices and their all-reduces
use the hierarchical model; two representative workers are simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from stalesim.errors import StalesimError
from stalesim.schedule import Schedule, ScheduleConfig, build_schedule, get_spec, resolve, validate
from stalesim.schedule.actions import Kind
from stalesim.schedule.ir import MAX_COMPUTE_ACTIONS
from stalesim.schedule.registry import phases_of
from stalesim.sim.cluster import Layout, comm_plan, replicate, send_pairs
from stalesim.sim.events import Program, Timeline, compile_schedule, simulate_program
from stalesim.sim.memory import MemoryReport, memory_report
from stalesim.sim.model import NS, SimHardware, StageCosts, resolve_cuts, stage_costs
from stalesim.sim.periodic import Period, busy_at, detect
from stalesim.sim.result import SimResult, build_result

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.api import SimOptions
    from stalesim.workloads.profile import Profile


@dataclass
class _Run:
    """One engine run of the representatives over ``n`` batches."""

    prog: Program
    tl: Timeline
    n: int
    done: list[int]
    inc: np.ndarray  # (n - 1, devices): busy time between consecutive batch completions
    waits: np.ndarray  # (n, stages): all-reduce wait (ARW) per batch, max over representatives


@lru_cache(maxsize=32)
def _base(cfg: ScheduleConfig, check: bool) -> Schedule:
    """One replica's schedule (cached for sweeps). The shortcut skips the validator's dry
    run on its short builds (``check=False``): the generators are validated by the IR's
    tests and by every other consumer, and the engine itself reports a deadlock."""
    return build_schedule(cfg, check=check)


@lru_cache(maxsize=32)
def _program(cfg: ScheduleConfig, reps: int, allreduce: bool, check: bool) -> Program:
    """The compiled schedule of ``reps`` representatives (cached for sweeps)."""
    if get_spec(cfg.schedule).data_parallel:
        return compile_schedule(_base(replace(cfg, workers=reps), check))
    sched = replicate(_base(cfg, check), reps, allreduce=allreduce)
    if check and reps > 1:
        validate(sched)
    return compile_schedule(sched)


def _run(cfg: ScheduleConfig, reps: list[int], P: int, layout: Layout, costs: StageCosts,
         hw: SimHardware, bucket_bytes: int | None, check: bool) -> _Run:
    prog = _program(cfg, len(reps), P > 1, check)
    sched = prog.sched
    plan = comm_plan(sched, layout, reps, costs, hw, bucket_bytes=bucket_bytes, stage_slot=_stage_slots(sched))
    tl = simulate_program(prog, costs, hw, workers=len(reps), comm=plan)
    n = sched.batches
    done = list(tl.batch_done)
    cum = busy_at(tl, done)
    inc = (cum[:, 1:] - cum[:, :-1]).T if n > 1 else np.zeros((0, sched.num_devices), dtype=np.int64)
    waits = np.zeros((n, sched.stages), dtype=np.int64)
    for g, a in enumerate(prog.actions):
        if a.kind is Kind.ARW:
            w = tl.end[g] - tl.start[g]
            if w > waits[a.batch, a.stage]:
                waits[a.batch, a.stage] = w
    return _Run(prog, tl, n, done, inc, waits)


def _mapped_sum(values: np.ndarray, lo: int, hi: int, per: Period | None) -> np.ndarray:
    """Sum over long-run batches k in [lo, hi) of ``values[source(k)]`` (rows)."""
    if hi <= lo:
        return np.zeros(values.shape[1:], dtype=np.int64)
    if per is None or per.inserted == 0:
        return values[lo:hi].sum(axis=0)
    b, c, j = per.safe_end, per.length, per.inserted
    total = values[lo:min(hi, b)].sum(axis=0) if lo < b else np.zeros(values.shape[1:], dtype=np.int64)
    t0 = max(lo, b + j * c)
    if t0 < hi:
        total = total + values[t0 - j * c:hi - j * c].sum(axis=0)
    m0, m1 = max(lo, b), min(hi, b + j * c)
    if m0 < m1:
        for src in range(b - c, b):  # long-run batches k in [m0, m1) with k = src (mod c)
            first = m0 + (src - m0) % c
            if first < m1:
                total = total + values[src] * ((m1 - 1 - first) // c + 1)
    return total


def _layout(cfg: ScheduleConfig, P: int, hw: SimHardware, placement: str,
            check: bool) -> tuple[Layout, list[tuple[int, int]]]:
    """Placement and replica classes (from the send pairs of one replica's schedule ``cfg``)."""
    spec = get_spec(cfg.schedule)
    G = hw.cluster.node_size if hw.cluster is not None else None
    if spec.data_parallel:
        layout = Layout(P, 1, G, placement)
        return layout, [(0, P)]
    base = _base(cfg, check)
    layout = Layout(P, base.num_devices, G, placement)
    return layout, layout.classes(send_pairs(base))


def simulate_cluster(workload: Profile | StageCosts, schedule: ScheduleConfig | Schedule,
                     hw: SimHardware, opts: SimOptions) -> SimResult:
    """Simulate replicas of a pipeline (or a data-parallel schedule) on a cluster (module doc)."""
    if isinstance(schedule, Schedule):
        if schedule.config is None:
            raise StalesimError("schedule: a cluster run needs the schedule's ScheduleConfig")
        schedule = schedule.config
    cfg = resolve(schedule)
    spec = get_spec(cfg.schedule)
    if spec.data_parallel:
        if opts.replicas > 1:
            raise StalesimError(f"replicas: {cfg.schedule!r} is data-parallel already; its workers are its "
                                f"replicas (give workers={opts.replicas})")
        P = cfg.workers
    else:
        P = opts.replicas
    if hw.topology == "bus" and (P > 1 or hw.cluster is not None):
        raise StalesimError("topology: bus (one channel for every transfer) has no meaning on a cluster; "
                            "use p2p or nic")
    phases = phases_of(cfg)
    N = phases[-1].last if phases else cfg.batches or 0
    M = cfg.microbatches if spec.uses_micro else 1
    check = not opts.symmetry
    if not opts.symmetry:  # every replica and every batch: refuse what would not finish
        size = N * P * cfg.stages * (3 * M + 1)
        if size > MAX_COMPUTE_ACTIONS:
            raise StalesimError(f"symmetry: simulating every replica and batch means about {size:,} actions, "
                                f"more than this tool builds ({MAX_COMPUTE_ACTIONS:,}); keep the symmetric "
                                f"shortcut (it is exact)")
    first = phases[-1].first if phases else 0
    extrapolate = opts.symmetry and spec.has_steady_state
    # a short run first (enough for a 1F1B-like period), doubled until a period shows
    n = min(N, first + 10) if extrapolate else N
    layout, classes = _layout(replace(cfg, batches=n), P, hw, opts.placement, check)
    costs = _costs(workload, cfg, P, M, opts)
    if opts.symmetry:
        reps = [r for r, _ in classes]
        if spec.data_parallel and P > 1:
            reps = [0, 1]  # the generator issues all-reduces only with two workers or more
    else:
        reps = list(range(P))
    per: Period | None = None
    while True:
        run = _run(replace(cfg, batches=n), reps, P, layout, costs, hw, opts.bucket_bytes, check)
        if n >= N:
            break
        extra = np.concatenate([run.inc, run.waits[:-1]], axis=1) if run.n > 1 else None
        per = detect(run.tl, n, first=first, extra=extra)
        if per is not None and per.safe_end > per.first:
            rem = (N - n) % per.length
            if rem:  # the inserted periods must be whole: run a few batches more
                n += rem
                per = None
                continue
            last = max(range(len(run.tl.end)), key=run.tl.end.__getitem__)
            if run.prog.actions[last].batch >= per.safe_end:
                per = replace(per, inserted=(N - n) // per.length)
                break
        per = None
        n = min(N, 2 * n)
    # build_result runs the plausibility pass, as for every simulate() result (the
    # representatives' devices are the result's device roles, in the same order)
    return _result(cfg, spec, phases, N, P, M, layout, classes, reps, costs, hw, opts, run, per)


def _costs(workload: Profile | StageCosts, cfg: ScheduleConfig, P: int, M: int, opts: SimOptions) -> StageCosts:
    if isinstance(workload, StageCosts):
        if workload.stages != cfg.stages:
            raise StalesimError(f"stages: {cfg.stages} requested, the stage costs have {workload.stages}")
        return workload
    if opts.ppv is not None and cfg.stages != len(opts.ppv) + 1:
        raise StalesimError(f"ppv: {len(opts.ppv)} entries give {len(opts.ppv) + 1} stages, "
                            f"but stages is {cfg.stages}")
    B = opts.batch_size or workload.batch_size
    parts = P * M
    if B % parts:
        raise StalesimError(f"batch_size: {B} is not divisible by replicas x microbatches ({P} x {M} = {parts}); "
                            f"each replica's micro-batch must be equal (give --batch-size)")
    cuts, ppv = resolve_cuts(workload, cfg.stages, opts.ppv, B)
    return stage_costs(workload, cuts, batch_size=B, action_batch=B // parts, loss_s=opts.loss_s, ppv=ppv)


def _result(cfg: ScheduleConfig, spec: Any, phases: list, N: int, P: int, M: int, layout: Layout,
            classes: list[tuple[int, int]], reps: list[int], costs: StageCosts, hw: SimHardware,
            opts: SimOptions, run: _Run, per: Period | None) -> SimResult:
    """The long run's result from the representatives' short run (and its period)."""
    sched = run.prog.sched
    done = _long_done(run, per)
    makespan = run.tl.makespan + (per.inserted * per.shift_ns if per is not None else 0)
    lo_k, hi_k, lo_t, hi_t, window = _steady_span(replace(sched, batches=N, phases=tuple(phases)), N,
                                                   makespan, done)
    it = (hi_t - lo_t) / (hi_k - lo_k) if window else makespan / N
    # busy per device over [lo_t, hi_t]: the sum of the busy time between consecutive completions
    if window:
        busy = _mapped_sum(run.inc, lo_k, hi_k, per)
    else:  # no steady window: the whole run, never extrapolated (no period to repeat)
        busy = busy_at(run.tl, [run.tl.makespan])[:, 0]
    waits = _mapped_sum(run.waits, lo_k, hi_k, per) / max(1, hi_k - lo_k)
    mem = memory_report(sched, costs, optimizer_state_factor=opts.optimizer_state_factor,
                        gradient_shards=opts.gradient_shards, weight_shards=opts.weight_shards)
    roles = _device_roles(sched, layout, classes, reps, busy, max(1, hi_t - lo_t), mem)
    slots = _stage_slots(sched)
    ar = [sum(b) / NS for b in comm_plan(sched, layout, reps, costs, hw, bucket_bytes=opts.bucket_bytes,
                                         stage_slot=slots).ar_buckets]
    notes = []
    if opts.method == "fast":
        notes.append("no closed form for replicas on a cluster: the symmetric event simulation answered "
                     "(exact, see docs/simulator.md)")
    return build_result(
        sched, costs, hw, mem.stages, method="symmetric" if opts.symmetry else "event",
        microbatches=M, workers=P, devices=layout.devices, batches=N, batch_size=costs.batch_size,
        iteration_ns=it, makespan_ns=makespan, utilization=roles.util, mean_utilization=roles.mean_util(),
        peak_memory_bytes=roles.peaks, memory_breakdown=roles.breakdown, steady_window=window,
        phases=[{"schedule": p.schedule, "first": p.first, "last": p.last, "end_s": done(p.last - 1) / NS}
                for p in phases],
        timeline=run.tl if opts.keep_timeline else None,
        schedule_fingerprint=None, fast_iteration_time_s=None, fast_formula="", notes=notes,
        device_roles=roles.roles, allreduce_s=ar, allreduce_exposed_s=[float(w) / NS for w in waits],
        cluster={**layout.to_dict(), "bucket_bytes": opts.bucket_bytes,
                 "allreduce_groups": [_group(layout.group_per_node(slot)) for slot in slots]},
        symmetry=_symmetry(classes, reps, run, per),
    )


def _stage_slots(sched: Schedule) -> list[int]:
    """Per stage, its device within a replica (0 for a data-parallel schedule: one device
    per worker)."""
    return [0 if sched.data_parallel else sched.device_of(s) for s in range(sched.stages)]


def _long_done(run: _Run, per: Period | None) -> Callable[[int], int]:
    """When batch k of the long run completes: its source batch in the short run, plus one
    period's shift per period inserted before it."""
    def done(k: int) -> int:
        if per is None:
            return run.done[k]
        src, q = per.source(k)
        return run.done[src] + q * per.shift_ns

    return done


def _steady_span(long_run: Schedule, N: int, makespan: int,
                 done: Callable[[int], int]) -> tuple[int, int, int, int, list[int]]:
    """(first batch, end batch, start ns, end ns, steady window) the iteration time is
    measured over: the long run's steady window, or the whole run (window [])."""
    win = long_run.steady_window()
    if win is None or win[1] <= win[0]:
        return 0, N, 0, makespan, []
    lo_k, hi_k = win
    return lo_k, hi_k, done(lo_k), done(hi_k), [lo_k, hi_k]


@dataclass
class _Roles:
    """Per device role (a representative's device standing for ``weights`` devices)."""

    roles: list[dict[str, Any]]
    util: list[float]
    weights: list[int]
    peaks: list[int]
    breakdown: list[dict[str, int]]

    def mean_util(self) -> float:
        """Mean utilization over every device of the cluster."""
        return sum(u * w for u, w in zip(self.util, self.weights)) / max(1, sum(self.weights))


def _device_roles(sched: Schedule, layout: Layout, classes: list[tuple[int, int]], reps: list[int],
                  busy: np.ndarray, span: int, mem: MemoryReport) -> _Roles:
    """One role per device of each replica class's representative, in class order."""
    D = layout.per_replica
    slots = _stage_slots(sched)
    stage_on = [[s for s in range(sched.stages) if slots[s] == d] for d in range(D)]
    out = _Roles([], [], [], [], [])
    for i, (rep, count) in enumerate(classes):
        w = reps.index(rep)
        for d in range(D):
            dev = w * D + d
            u = min(1.0, int(busy[dev]) / span)
            out.util.append(u)
            out.weights.append(count)
            out.peaks.append(mem.peak_bytes[dev])
            out.breakdown.append(mem.breakdown[dev])
            out.roles.append({"role": f"class {i} device {d}", "stages": stage_on[d], "devices": count,
                              "first_replica": rep, "global_device": layout.global_device(rep, d),
                              "node": layout.node(rep, d), "utilization": u,
                              "peak_memory_bytes": mem.peak_bytes[dev]})
    return out


def _symmetry(classes: list[tuple[int, int]], reps: list[int], run: _Run, per: Period | None) -> dict[str, Any]:
    """What the symmetric shortcut simulated (SimResult.symmetry)."""
    return {
        "replica_classes": len(classes), "representatives_simulated": len(reps),
        "batches_simulated": run.n, "extrapolated": per is not None,
        "period_batches": per.length if per is not None else None,
        "period_s": per.shift_ns / NS if per is not None else None,
        "periodic_from_batch": per.first if per is not None else None,
        "actions_simulated": run.prog.n_actions,
    }


def _group(per_node: list[int]) -> dict[str, int]:
    return {"members": sum(per_node), "nodes": len(per_node), "max_per_node": max(per_node),
            "min_per_node": min(per_node)}
