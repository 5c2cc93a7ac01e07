"""``SimResult``: what a simulation reports, plus its trace and Gantt views.

All times in the result are seconds (floats); the engine's integer
nanoseconds are converted once, here. ``to_dict()`` is flat enough for
``pandas.json_normalize`` / ``pd.DataFrame([r.to_dict() for r in results])``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.schedule.actions import COMPUTE_KIND_NAMES
from stalesim.sim.model import NS
from stalesim.sim.plausibility import finish
from stalesim.trace import Flow, TraceEvent, action_label, chrome_trace, write_chrome_trace
from stalesim.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.schedule.ir import Schedule
    from stalesim.sim.events import Timeline
    from stalesim.sim.model import SimHardware, StageCosts

@dataclass
class SimResult:
    """One simulated configuration.

    Timing: ``iteration_time_s`` is the steady-state time per mini-batch,
    measured between the completion (last update) of batch ``steady_window[0]``
    and of batch ``steady_window[1]``, so fill and drain are excluded
    (a schedule without a steady state, the hybrid switch: makespan / batches;
    a synchronous warm-up phase is never inside the window). ``fill_drain_s``
    = makespan - batches x iteration. ``speedup`` = the same model on one
    device running ``sequential`` (sum of the stage costs at the full batch)
    over ``iteration_time_s``. ``utilization``: per device, compute busy / wall
    inside the steady window; ``bubble_fraction`` = 1 - mean utilization.

    Trust: ``cost_source`` is the least trustworthy origin of the per-stage
    costs over the batch sizes used (``measured``, ``interpolated``,
    ``roofline``, ``extrapolated`` outside the profiled batch sizes, or
    ``given`` stage costs); ``cost_detail`` has, per batch size used (the
    mini-batch and the action batch), its source and basis, the measured batch
    sizes and the extrapolation rule. ``warnings`` lists every physical limit
    the prediction crosses, with its cause (:mod:`stalesim.sim.plausibility`).
    """

    schedule: str
    method: str  # "event" | "fast"
    stages: int
    microbatches: int
    workers: int
    batches: int
    devices: int
    batch_size: int
    iteration_time_s: float
    fill_drain_s: float
    makespan_s: float
    throughput_samples_per_s: float
    speedup: float
    sequential_time_s: float
    utilization: list[float]
    bubble_fraction: float
    peak_memory_bytes: list[int]
    memory_breakdown: list[dict[str, int]]
    staleness: list[int]
    versions: dict[str, Any]
    partition: dict[str, Any]
    hardware: dict[str, Any]
    hardware_note: str
    steady_window: list[int] = field(default_factory=list)
    mean_iteration_time_s: float | None = None  # makespan / batches (fill, drain, warm-up included)
    phases: list[dict[str, Any]] = field(default_factory=list)  # {schedule, first, last[, end_s]}
    schedule_fingerprint: str | None = None  # of the schedule the event path ran (Schedule.fingerprint)
    fast_iteration_time_s: float | None = None
    fast_formula: str = ""
    notes: list[str] = field(default_factory=list)
    stage_costs: dict[str, Any] = field(default_factory=dict)
    cost_source: str = "given"
    cost_detail: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # data x pipeline clusters (stalesim.sim.scale): with replicas, ``utilization`` and
    # ``peak_memory_bytes`` hold one entry per distinct device role (``device_roles``:
    # role, stages, devices it stands for, utilization, peak memory), not per device
    device_roles: list[dict[str, Any]] = field(default_factory=list)
    allreduce_s: list[float] = field(default_factory=list)  # per stage: the all-reduce's own time per batch
    allreduce_exposed_s: list[float] = field(default_factory=list)  # per stage: mean ARW wait per batch
    cluster: dict[str, Any] = field(default_factory=dict)  # layout: replicas, nodes, placement, groups
    symmetry: dict[str, Any] = field(default_factory=dict)  # what the shortcut simulated / extrapolated
    timeline: Timeline | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ JSON
    def steady_window_ns(self) -> tuple[int, int]:
        """The steady window in simulated ns, read from the timeline (the whole run where the
        window is empty)."""
        tl = self.timeline
        if tl is None:
            raise ValueError("no timeline: the fast path has no trace (use method='event')")
        w = self.steady_window
        if not w or w[1] <= w[0]:
            return 0, tl.makespan
        lo, hi = tl.batch_done[w[0]], tl.batch_done[w[1]]
        return (lo, hi) if hi > lo else (0, int(self.makespan_s * NS))

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "timeline"}
        return d

    def summary(self) -> str:
        """A few human lines (the CLI's text output)."""
        util = " ".join(f"{u:.2f}" for u in self.utilization)
        mem = ", ".join(fmt_bytes(b) for b in self.peak_memory_bytes)
        lines = [
            (f"schedule {self.schedule}: S={self.stages} M={self.microbatches} P={self.workers} "
             f"batches={self.batches} batch_size={self.batch_size} devices={self.devices} "
             f"({self.method} path)"),
            f"hardware: {self.hardware_note}",
            f"partition: ppv={self.partition.get('ppv')} cuts={self.partition.get('cuts')}",
            (f"iteration time   {fmt_seconds(self.iteration_time_s)} per mini-batch (steady state; fill+drain "
             f"{fmt_seconds(self.fill_drain_s)}, makespan {fmt_seconds(self.makespan_s)})"),
            f"throughput       {_fmt_rate(self.throughput_samples_per_s)} samples/s",
            (f"speed-up         {self.speedup:.3f}x over one device running sequential "
             f"({fmt_seconds(self.sequential_time_s)} per batch)"),
            f"utilization      {util}  (bubble {self.bubble_fraction:.3f})",
            f"peak memory      {mem}",
            f"staleness        {self.staleness}  versions kept {self.versions.get('versions_kept')}",
            f"costs            {self.cost_source}{_cost_range(self.cost_detail)}",
        ]
        if self.fast_iteration_time_s is not None and self.method == "event":
            lines.append(f"fast path        {fmt_seconds(self.fast_iteration_time_s)} ({self.fast_formula})")
        if self.device_roles:
            c = self.cluster
            lines.append(f"cluster          {c.get('replicas')} replicas x {c.get('devices_per_replica')} devices "
                         f"= {c.get('devices')} devices on {c.get('nodes')} node(s) of {c.get('node_size') or 'any'}"
                         f" ({c.get('placement')} placement)")
            for r in self.device_roles:
                lines.append(f"  {r['role']:<18} stages {r['stages']}  x{r['devices']}  util {r['utilization']:.3f}"
                             f"  peak {fmt_bytes(r['peak_memory_bytes'])}")
        if self.allreduce_s:
            ar = " ".join(fmt_seconds(x) for x in self.allreduce_s)
            ex = " ".join(fmt_seconds(x) for x in self.allreduce_exposed_s)
            lines.append(f"all-reduce       {ar}  (per stage; exposed {ex})")
        if self.symmetry:
            y = self.symmetry
            how = (f"period of {y['period_batches']} batch(es) = {fmt_seconds(y['period_s'])} extrapolated"
                   if y.get("extrapolated") else "no extrapolation")
            lines.append(f"simulated        {y['representatives_simulated']} representative replica(s) of "
                         f"{y['replica_classes']} class(es), {y['batches_simulated']} batch(es); {how}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)

    # ------------------------------------------------------------------ trace
    def trace_events(self) -> tuple[list[TraceEvent], list[Flow]]:
        """Slices (compute and comm tracks) and send->receive flows from the timeline."""
        tl = self.timeline
        if tl is None:
            raise ValueError("no timeline: the fast path has no trace (use method='event')")
        prog = tl.program
        us = 1e-3
        events: list[TraceEvent] = []
        flows: list[Flow] = []
        labels = [action_label(a) for a in prog.actions]
        coll_of = {op[1]: op[4] for ops in prog.ops for op in ops if op[0] == 3}  # AR -> collective
        for gid, a in enumerate(prog.actions):
            d = prog.device_of_gid[gid]
            k = a.kind.value
            if k in COMPUTE_KIND_NAMES:
                events.append(TraceEvent(labels[gid], tl.start[gid] * us,
                                         (tl.end[gid] - tl.start[gid]) * us, d, "compute", k))
            elif k.startswith("SEND"):
                xs, arr = tl.xfer[gid]
                events.append(TraceEvent(labels[gid], xs * us, (arr - xs) * us, d, "comm", k))
                rg = prog.send_to_recv.get(gid)
                if rg is not None:
                    flows.append(Flow(gid, labels[gid], d, xs * us, prog.device_of_gid[rg],
                                      tl.end[rg] * us))
            elif k.startswith("RECV"):
                events.append(TraceEvent(labels[gid], tl.start[gid] * us,
                                         (tl.end[gid] - tl.start[gid]) * us, d, "comm", k))
            elif k == "AR":
                cs, cd = tl.coll_span[coll_of[gid]]
                events.append(TraceEvent(labels[gid], cs * us, (cd - cs) * us, d, "comm", k))
            else:  # ARW
                events.append(TraceEvent(labels[gid], tl.start[gid] * us,
                                         (tl.end[gid] - tl.start[gid]) * us, d, "comm", k))
        for d, s0, e0, gid in tl.cpu_jobs:
            events.append(TraceEvent(f"{labels[gid]} cpu", s0 * us, (e0 - s0) * us, d, "compute", "comm-cpu"))
        return events, flows

    def chrome_trace(self) -> dict[str, Any]:
        """The timeline as a Chrome trace (chrome://tracing, Perfetto), the executor's format."""
        events, flows = self.trace_events()
        n_dev = self.timeline.program.sched.num_devices if self.timeline is not None else self.devices
        names = {d: f"device {d}" for d in range(n_dev)}
        meta = {"producer": "stalesim simulate", "schedule": self.schedule,
                "stages": self.stages, "microbatches": self.microbatches, "workers": self.workers,
                "hardware": self.hardware_note, "iteration_time_s": self.iteration_time_s}
        return chrome_trace(events, flows, process_names=names, metadata=meta)

    def write_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`chrome_trace` to ``path`` as JSON; returns the path written."""
        return write_chrome_trace(path, self.chrome_trace())

    def plot(self, path: str | os.PathLike[str], **kwargs: Any) -> Path:
        """Draw the Gantt chart of the timeline to ``path`` (:func:`stalesim.sim.plot.gantt`)."""
        from stalesim.sim.plot import gantt

        return gantt(self, path, **kwargs)


def build_result(sched: Schedule, costs: StageCosts, hw: SimHardware, stage_counts: Any, *, method: str,
                 microbatches: int, workers: int, devices: int, batches: int, batch_size: int,
                 iteration_ns: float, makespan_ns: float, utilization: list[float], mean_utilization: float,
                 peak_memory_bytes: list[int], memory_breakdown: list[dict[str, int]],
                 steady_window: list[int], phases: list[dict[str, Any]], timeline: Timeline | None,
                 **extra: Any) -> SimResult:
    """The one place a :class:`SimResult` is made: every path (the event and fast paths of
    :func:`stalesim.sim.simulate`, the cluster path of :mod:`stalesim.sim.scale`) derives the
    same fields the same way, then the plausibility pass adds provenance and warnings.

    Times come in integer-ns floats and leave in seconds. ``stage_counts``: the memory
    report's per-stage counts (``MemoryReport.stages``). ``mean_utilization`` is the path's
    own mean (a cluster weighs each device role by the devices it stands for). ``extra``:
    the optional fields of the path (fingerprint, fast-path time, cluster and symmetry).
    """
    S = sched.stages
    it, N = iteration_ns, batches
    it_s = it / NS
    vt = sched.versions
    staleness = vt.staleness() if vt is not None else [0] * S
    counts = _per_stage_counts(stage_counts, S)
    versions = {
        "policy": str(sched.policy),
        "versions_kept": counts["versions_kept"],
        "grad_buffers": counts["grad_buffers"],
        "max_in_flight": counts["max_in_flight"],
        "weight_inconsistent_stages": vt.inconsistent_stages() if vt is not None else [],
        "max_staleness": max(staleness, default=0),
    }
    result = SimResult(
        schedule=sched.name, method=method, stages=S, microbatches=microbatches, workers=workers,
        batches=N, devices=devices, batch_size=batch_size,
        iteration_time_s=it_s,
        fill_drain_s=max(0.0, (makespan_ns - N * it) / NS),
        makespan_s=makespan_ns / NS,
        mean_iteration_time_s=makespan_ns / NS / N,
        throughput_samples_per_s=batch_size / it_s if it_s > 0 else float("inf"),
        speedup=(costs.seq_ns / it) if it > 0 else float("inf"),
        sequential_time_s=costs.seq_ns / NS,
        utilization=utilization,
        bubble_fraction=max(0.0, 1.0 - mean_utilization) if utilization else 0.0,
        peak_memory_bytes=peak_memory_bytes,
        memory_breakdown=memory_breakdown,
        staleness=list(staleness),
        versions=versions,
        partition={"cuts": list(costs.cuts), "ppv": list(costs.ppv),
                   "layer_ranges": [list(r) for r in costs.layer_ranges]},
        hardware=hw.to_dict(),
        hardware_note=hw.describe() + ("" if not hw.notes else f" ({'; '.join(hw.notes)})"),
        steady_window=steady_window,
        phases=phases,
        stage_costs=costs.to_dict(),
        timeline=timeline,
        **extra,
    )
    return finish(result, costs, sched, hw)


_STAGE_COUNTS = ("versions_kept", "grad_buffers", "max_in_flight")


def _per_stage_counts(counts: Any, S: int) -> dict[str, list[int]]:
    """Per stage, the largest count of any device holding it (a stage on several devices)."""
    out = {k: [0] * S for k in _STAGE_COUNTS}
    for c in counts:
        for k, v in out.items():
            v[c.stage] = max(v[c.stage], getattr(c, k))
    return out


def _cost_range(detail: dict[str, Any]) -> str:
    sizes = detail.get("measured_batch_sizes")
    rule = detail.get("rule")
    out = f" (profiled at batch {', '.join(map(str, sizes))})" if sizes else ""
    return out + (f", extrapolation rule {rule}" if rule else "")


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"  # 84,010 not 8.401e+04
