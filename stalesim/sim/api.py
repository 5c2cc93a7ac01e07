"""``simulate(workload, schedule, hardware, options)`` -> :class:`SimResult`.

The one entry point the CLI (``simulate``, ``sweep``), ``validate`` and the
figures call. The schedule is a :class:`ScheduleConfig` (built here with
:func:`stalesim.schedule.build_schedule`, the same call the emulator and the
executor make) or an already built :class:`Schedule` (``validate`` passes the
exact one it runs). The workload is a per-layer profile (partitioned by
``options.ppv`` or the exact min-max partitioner, scaled to the action batch
size) or ready :class:`StageCosts`. Every schedule fact (action batch size,
steady window, phases, memory counts, staleness) is asked of the IR.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.schedule import Schedule, ScheduleConfig, get_spec, resolve
from stalesim.schedule.ir import Phase
from stalesim.schedule.registry import phases_of
from stalesim.sim.fastpath import FastResult, fast_iteration
from stalesim.sim.jitter import ActionJitter
from stalesim.sim.memory import memory_report
from stalesim.sim.model import NS, SimHardware, StageCosts, resolve_cuts, stage_costs
from stalesim.sim.result import SimResult, build_result

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.events import Program, Timeline
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.profile import Profile

METHODS = ("event", "fast")
# the event simulation replays every action (~30 us each on a small CPU): this many take
# about 15 s; longer runs are what the closed form (method "fast") is for
MAX_EVENT_ACTIONS = 500_000


@dataclass(frozen=True)
class SimOptions:
    """How to simulate, apart from the schedule and the hardware.

    ``ppv``: pipeline placement vector (None: min-max partition over the stages);
    ``batch_size``: mini-batch (default: the profile's); ``method``: ``event``
    (SimPy) or ``fast`` (closed form); ``loss_s``: one LOSS at the full batch;
    ``optimizer_state_factor``: optimizer state per parameter byte (SGD momentum 1);
    ``keep_timeline``: keep the event timeline (needed for traces and plots);
    ``jitter``: draw every compute action's time around its mean (:mod:`stalesim.sim.jitter`;
    event simulation of one pipeline only).
    """

    ppv: tuple[int, ...] | None = None
    batch_size: int | None = None
    method: str = "event"
    loss_s: float = 0.0
    optimizer_state_factor: float = 1.0
    keep_timeline: bool = True
    recv_ahead: int = 1  # receive buffers a runtime keeps posted (memory; the executor: 8)
    # data x pipeline clusters (stalesim.sim.scale): P replicas of a pipeline schedule,
    # their placement on nodes, DDP-style gradient buckets, and whether to exploit symmetry
    replicas: int = 1
    # sharded data parallelism (ZeRO-2/3, FSDP): ranks each device's gradients / weights are
    # sharded over, for memory (1: unsharded; the communication is in the StageCosts)
    gradient_shards: int = 1
    weight_shards: int = 1
    placement: str = "pipeline"
    bucket_bytes: int | None = None
    symmetry: bool = True
    jitter: ActionJitter | None = None

    def check(self) -> None:
        from stalesim.limits import MAX_BYTES, MAX_FACTOR, MAX_SECONDS, check_int, check_number

        if self.method not in METHODS:
            raise StalesimError(f"method: expected one of {', '.join(METHODS)}, got {self.method!r}")
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, lo=1)
        check_number("loss_s", self.loss_s, hi=MAX_SECONDS)
        check_number("optimizer_state_factor", self.optimizer_state_factor, hi=MAX_FACTOR)
        check_int("replicas", self.replicas, lo=1)
        for f in ("gradient_shards", "weight_shards"):
            check_int(f, getattr(self, f), lo=1, hi=self.replicas)
        if self.bucket_bytes is not None:
            check_int("bucket_bytes", self.bucket_bytes, lo=1, hi=MAX_BYTES)
        from stalesim.sim.cluster import PLACEMENTS

        if self.placement not in PLACEMENTS:
            raise StalesimError(f"placement: expected one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.jitter is not None:
            self.jitter.check()
            if self.method != "event" or self.replicas > 1:
                raise StalesimError("jitter: drawn action times need the event simulation of one pipeline "
                                    "(method event, replicas 1)")


def resolve_hardware(hardware: Hardware | SimHardware | None, profile: Profile | None) -> SimHardware:
    if hardware is None:
        dev = profile.device if profile is not None else "profile device"
        return SimHardware(device=dev, link="ideal",
                           notes=("default: the profile's own device with an ideal link",))
    if isinstance(hardware, SimHardware):
        return hardware
    return SimHardware.from_hardware(hardware)


def _short(cfg: ScheduleConfig) -> ScheduleConfig:
    """The same configuration over just enough batches for the liveness counts and the
    staleness to reach their steady values (the fast path needs no more)."""
    n = min(cfg.batches or 0, min(cfg.warmup, cfg.batches or 0) + 2 * cfg.stages + 4)
    sw = None if cfg.switch is None else min(cfg.switch, n)
    return replace(cfg, batches=n, switch=sw)


def simulate(
    workload: Profile | StageCosts,
    schedule: ScheduleConfig | Schedule,
    hardware: Hardware | SimHardware | None = None,
    options: SimOptions | None = None,
) -> SimResult:
    """Simulate one configuration (see the module doc); StalesimError names the bad field."""
    opts = options or SimOptions()
    opts.check()
    given, phases = _schedule_parts(schedule)
    hw = resolve_hardware(hardware, None if isinstance(workload, StageCosts) else workload)
    if opts.replicas > 1 or hw.cluster is not None:  # data x pipeline on a cluster
        if opts.jitter is not None:
            raise StalesimError("jitter: drawn action times need the event simulation of one pipeline "
                                "(no cluster)")
        from stalesim.sim.scale import simulate_cluster

        return simulate_cluster(workload, schedule, hw, opts)
    sched, prog = _compile(given, opts)
    N = phases[-1].last if phases else sched.batches
    costs, B = _stage_costs(workload, sched, opts)
    # a user's own order (--schedule-file) has no generator, so no closed form: the event
    # simulation alone times it
    fast = fast_iteration(sched, costs, hw, phases=phases) if phases else None
    if prog is not None:
        from stalesim.sim.events import simulate_program

        timeline = simulate_program(prog, costs, hw, workers=sched.workers, jitter=opts.jitter)
        timing = _event_timing(sched, timeline, phases, N)
    elif fast is not None:
        timeline, timing = None, _fast_timing(fast)
    else:
        raise StalesimError(f"method: {sched.name!r} is a user's order without a closed form; "
                            "use the event simulation")
    mem = memory_report(sched, costs, optimizer_state_factor=opts.optimizer_state_factor,
                        recv_ahead=opts.recv_ahead, gradient_shards=opts.gradient_shards,
                        weight_shards=opts.weight_shards)
    util = timing.utilization
    return build_result(
        sched, costs, hw, mem.stages, method=opts.method, microbatches=sched.microbatches,
        workers=sched.workers, devices=sched.num_devices, batches=N, batch_size=B,
        iteration_ns=timing.iteration_ns, makespan_ns=timing.makespan_ns, utilization=util,
        mean_utilization=sum(util) / len(util) if util else 0.0,
        peak_memory_bytes=mem.peak_bytes, memory_breakdown=mem.breakdown, steady_window=timing.window,
        phases=_phase_rows(phases, timing.phase_end),
        timeline=timeline if opts.keep_timeline else None,
        schedule_fingerprint=sched.fingerprint() if prog is not None else None,
        fast_iteration_time_s=None if fast is None else fast.iteration_ns / NS,
        fast_formula="" if fast is None else fast.formula,
        notes=[],
    )


def _schedule_parts(schedule: ScheduleConfig | Schedule) -> tuple[Schedule | ScheduleConfig, list[Phase]]:
    """The schedule as given (a built one is simulated as it is) or its resolved
    configuration, and the run's phases."""
    if isinstance(schedule, Schedule):
        return schedule, list(schedule.phases)
    if isinstance(schedule, ScheduleConfig):
        cfg = resolve(schedule)
        return cfg, phases_of(cfg)
    raise StalesimError(f"schedule: expected a ScheduleConfig or Schedule, got {type(schedule).__name__}")


def _compile(given: Schedule | ScheduleConfig, opts: SimOptions) -> tuple[Schedule, Program | None]:
    """The schedule to simulate and, for the event simulation, its compiled program (a
    configuration's are cached per process; the fast path needs only a short build)."""
    from stalesim.sim.events import compile_schedule, program_for, schedule_for

    if isinstance(given, Schedule):
        return given, compile_schedule(given) if opts.method == "event" else None
    cfg = given
    if opts.ppv is not None and cfg.stages != len(opts.ppv) + 1:
        raise StalesimError(f"ppv: {len(opts.ppv)} entries give {len(opts.ppv) + 1} stages, "
                            f"but stages is {cfg.stages}")
    if opts.method == "event" and cfg.compute_actions() > MAX_EVENT_ACTIONS:
        raise StalesimError(
            f"batches: an event simulation of about {cfg.compute_actions():,} actions takes minutes "
            f"(at most {MAX_EVENT_ACTIONS:,}); use the closed form (method fast) or fewer batches")
    prog = program_for(cfg) if opts.method == "event" else None
    return (prog.sched if prog is not None else schedule_for(_short(cfg))), prog


def _stage_costs(workload: Profile | StageCosts, sched: Schedule, opts: SimOptions) -> tuple[StageCosts, int]:
    """The stage costs and the mini-batch size: as given, or the profile partitioned over
    the schedule's stages (``opts.ppv`` or min-max) and priced at its action batch size."""
    S = sched.stages
    if isinstance(workload, StageCosts):
        if workload.stages != S:
            raise StalesimError(f"stages: {S} requested, the stage costs have {workload.stages}")
        return workload, workload.batch_size
    if workload is None:
        raise StalesimError("profile: give a profile or stage costs")
    B = opts.batch_size or workload.batch_size
    ab = sched.action_batch_size(B)
    cuts, ppv_used = resolve_cuts(workload, S, opts.ppv, B)
    return stage_costs(workload, cuts, batch_size=B, action_batch=ab, loss_s=opts.loss_s, ppv=ppv_used), B


@dataclass(frozen=True)
class _Timing:
    """What either path measured: ns per mini-batch, per-device utilization (checked and
    clipped by the plausibility pass), and for the event simulation the steady window
    and each phase's end (seconds)."""

    iteration_ns: float
    makespan_ns: float
    utilization: list[float]
    window: list[int]
    phase_end: list[float]


def _event_timing(sched: Schedule, timeline: Timeline, phases: list[Phase], N: int) -> _Timing:
    """Iteration time and utilization over the steady window (no steady state: the run's mean)."""
    from stalesim.sim.events import busy_in_window

    done = timeline.batch_done
    win = sched.steady_window()
    if win is None or win[1] <= win[0]:  # no steady state: the run's mean, no window
        it = timeline.makespan / N
        lo, hi = 0, timeline.makespan
        window: list[int] = []
    else:
        k0, k1 = win
        it = (done[k1] - done[k0]) / (k1 - k0)
        lo, hi = done[k0], done[k1]
        window = [k0, k1]
    busy = busy_in_window(timeline, lo, hi)
    span = max(1, hi - lo)
    return _Timing(it, timeline.makespan, [b / span for b in busy], window,
                   [done[p.last - 1] / NS for p in phases])


def _phase_rows(phases: list[Phase], phase_end: list[float]) -> list[dict[str, Any]]:
    """SimResult.phases: each phase's fields, with its end (seconds) where the run timed it."""
    if not phase_end:
        return [asdict(p) for p in phases]
    return [dict(asdict(p), end_s=e) for p, e in zip(phases, phase_end)]


def _fast_timing(fast: FastResult) -> _Timing:
    """The closed form's iteration, makespan and utilization (no window, no phase ends)."""
    it = fast.iteration_ns
    return _Timing(it, fast.makespan_ns, [b / it if it else 0.0 for b in fast.busy_ns], [], [])


def default_batches(cfg: ScheduleConfig) -> int:
    """Simulation length used when ``cfg.batches`` is None."""
    return get_spec(cfg.schedule).default_batches(cfg)
