"""``simulate(...)``: profile + partition + schedule + hardware -> :class:`SimResult`.

The one entry point the CLI (``simulate``, ``sweep``) and ``validate`` call.
It resolves the partition (``ppv`` or the exact min-max partitioner), scales
the profile to the (micro-)batch size, builds the schedule from the IR (or
takes a ready one), runs the event simulation (or the fast path) and derives
memory, staleness and versions from the same IR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.sim.fastpath import fast_iteration
from stalesim.sim.memory import memory_report
from stalesim.sim.model import NS, SimHardware, StageCosts, resolve_cuts, stage_costs
from stalesim.sim.result import SimResult

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.schedule.ir import Schedule
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.profile import Profile

METHODS = ("event", "fast")


def default_batches(name: str, stages: int, microbatches: int = 1) -> int:
    """Enough mini-batches for a steady state between fill and drain."""
    if name in ("gpipe", "1f1b", "sequential", "dp"):
        return 8
    if name == "pipe-sgd":
        return 12
    return max(16, 8 * stages + 16)


def steady_window(batches: int) -> tuple[int, int]:
    """Batches whose completions bound the steady-state window (middle half)."""
    if batches < 4:
        return 0, batches - 1
    q = batches // 4
    return q, batches - 1 - q


def _action_batch(name: str, uses_micro: bool, data_parallel: bool, B: int, M: int, P: int) -> int:
    if data_parallel and P > 1:
        if B % P:
            raise StalesimError(f"batch_size: {B} is not divisible by workers={P}")
        return B // P
    if uses_micro and M > 1:
        if B % M:
            raise StalesimError(f"batch_size: {B} is not divisible by microbatches={M}")
        return B // M
    return B


def resolve_hardware(hardware: Hardware | SimHardware | None, profile: Profile | None) -> SimHardware:
    if hardware is None:
        dev = profile.device if profile is not None else "profile device"
        return SimHardware(device=dev, link="ideal",
                           notes=("default: the profile's own device with an ideal link",))
    if isinstance(hardware, SimHardware):
        return hardware
    return SimHardware.from_hardware(hardware)


def simulate(
    profile: Profile | None = None,
    schedule: str | Schedule = "pipedream",
    *,
    stages: int | None = None,
    ppv: Sequence[int] | None = None,
    microbatches: int = 1,
    batches: int | None = None,
    workers: int = 1,
    batch_size: int | None = None,
    hardware: Hardware | SimHardware | None = None,
    devices: int | None = None,
    switch: int | None = None,
    warmup: int = 0,
    costs: StageCosts | None = None,
    method: str = "event",
    loss_s: float = 0.0,
    optimizer_state_factor: float = 1.0,
    keep_timeline: bool = True,
) -> SimResult:
    """Simulate one configuration.

    Give a ``profile`` (per-layer costs; the partition comes from ``ppv`` or the
    min-max partitioner over ``stages``) or ready ``costs``. ``schedule`` is a
    name from the IR registry or an already built :class:`Schedule` (then its
    own stages/micro-batches/workers/batches are used). ``hardware``: a
    workloads ``Hardware`` (catalog or JSON), a :class:`SimHardware`, or None
    for the profile's own device with an ideal link. ``method``: ``event``
    (SimPy) or ``fast`` (closed form). ``batch_size`` defaults to the profile's.
    """
    from stalesim.schedule import get_spec
    from stalesim.sim.engine import compile_schedule, program_for, schedule_facts, schedule_for

    if method not in METHODS:
        raise StalesimError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    notes: list[str] = []
    sched = None
    if isinstance(schedule, str):
        name = schedule
        spec = get_spec(name)
    else:
        sched = schedule
        name = sched.name
        spec = get_spec(name)
        stages, microbatches, workers = sched.stages, sched.microbatches, sched.workers
        batches = sched.batches
    hw = resolve_hardware(hardware, profile)
    if ppv is not None and stages is None:
        stages = len(ppv) + 1
    S = stages or (costs.stages if costs is not None else 1)
    M = microbatches if spec.uses_micro else 1
    if microbatches > 1 and not spec.uses_micro:
        notes.append(f"{name} does not split batches: microbatches={microbatches} ignored")
    P = workers if spec.data_parallel else 1
    if workers > 1 and not spec.data_parallel:
        notes.append(f"{name} is not data-parallel: workers={workers} ignored")
    N = batches or default_batches(name, S, M)
    if costs is None:
        if profile is None:
            raise StalesimError("profile: give a profile or stage costs")
        B = batch_size or profile.batch_size
        ab = _action_batch(name, spec.uses_micro, spec.data_parallel, B, M, P)
        cuts, ppv_used = resolve_cuts(profile, S, ppv, B)
        costs = stage_costs(profile, cuts, batch_size=B, action_batch=ab, loss_s=loss_s, ppv=ppv_used)
    else:
        B = costs.batch_size
        if costs.stages != S:
            raise StalesimError(f"stages: {S} requested, the stage costs have {costs.stages}")
    cfg = {"stages": S, "batches": N, "microbatches": M, "workers": P, "devices": devices, "switch": switch,
               "warmup": warmup}
    if sched is None:
        if method == "event":
            prog = program_for(name, **cfg)
            sched = prog.sched
            if prog.facts is None:
                prog.facts = schedule_facts(sched)
            facts = prog.facts
        else:
            # memory and staleness only need a short run of the IR
            short = cfg if name == "hybrid" else dict(cfg, batches=min(N, max(2 * S + 4, warmup + 4)))
            sched, facts = schedule_for(name, **short)
            prog = None
    else:
        prog = compile_schedule(sched) if method == "event" else None
        facts = schedule_facts(sched)
    counts, staleness, inconsistent = facts
    fast = fast_iteration(name, costs, hw, microbatches=M, workers=P, batches=N,
                          devices=sched.num_devices if not spec.data_parallel else None,
                          switch=sched.params.get("switch", switch))
    n_dev = sched.num_devices
    timeline = None
    if method == "event":
        from stalesim.sim.engine import busy_in_window, simulate_program

        timeline = simulate_program(prog, costs, hw, workers=P)
        done = timeline.batch_done
        k0, k1 = steady_window(N)
        if name == "hybrid" or k1 <= k0:
            it = timeline.makespan / N
            lo, hi = 0, timeline.makespan
            window = [0, N - 1]
        else:
            it = (done[k1] - done[k0]) / (k1 - k0)
            lo, hi = done[k0], done[k1]
            window = [k0, k1]
        busy = busy_in_window(timeline, lo, hi)
        span = max(1, hi - lo)
        util = [b / span for b in busy]  # checked/clipped by the plausibility pass
        makespan = timeline.makespan
    else:
        it = fast.iteration_ns
        util = [b / it if it else 0.0 for b in fast.busy_ns]  # checked by the plausibility pass
        makespan = fast.makespan_ns
        window = []
    mem = memory_report(sched, costs, optimizer_state_factor=optimizer_state_factor, counts=counts)
    versions = {
        "policy": str(sched.policy),
        "versions_kept": _per_stage(mem.stages, S, "versions_kept"),
        "grad_buffers": _per_stage(mem.stages, S, "grad_buffers"),
        "max_in_flight": _per_stage(mem.stages, S, "max_in_flight"),
        "weight_inconsistent_stages": list(inconsistent),
        "max_staleness": max(staleness, default=0),
    }
    it_s = it / NS
    hw_note = hw.describe() + ("" if not hw.notes else f" ({'; '.join(hw.notes)})")
    result = SimResult(
        schedule=name, method=method, stages=S, microbatches=M, workers=P, batches=N,
        devices=n_dev, batch_size=B,
        iteration_time_s=it_s,
        fill_drain_s=max(0.0, (makespan - N * it) / NS),
        makespan_s=makespan / NS,
        throughput_samples_per_s=B / it_s if it_s > 0 else float("inf"),
        speedup=(costs.seq_ns / it) if it > 0 else float("inf"),
        sequential_time_s=costs.seq_ns / NS,
        utilization=util,
        bubble_fraction=max(0.0, 1.0 - sum(util) / len(util)) if util else 0.0,
        peak_memory_bytes=mem.peak_bytes,
        memory_breakdown=mem.breakdown,
        staleness=list(staleness),
        versions=versions,
        partition={"cuts": list(costs.cuts), "ppv": list(costs.ppv),
                   "layer_ranges": [list(r) for r in costs.layer_ranges]},
        hardware=hw.to_dict(),
        hardware_note=hw_note,
        steady_window=window,
        fast_iteration_time_s=fast.iteration_ns / NS,
        fast_formula=fast.formula,
        notes=notes,
        stage_costs=costs.to_dict(),
        timeline=timeline if keep_timeline else None,
    )
    # ---- plausibility pass (issue 17): cost provenance + physical-limit checks -> warnings
    from stalesim.sim.plausibility import finish

    return finish(result, costs, sched, hw)


def _per_stage(counts: Any, S: int, attr: str) -> list[int]:
    out = [0] * S
    for c in counts:
        out[c.stage] = max(out[c.stage], getattr(c, attr))
    return out
