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
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError
from stalesim.schedule import Schedule, ScheduleConfig, get_spec, resolve
from stalesim.schedule.registry import phases_of
from stalesim.sim.fastpath import fast_iteration
from stalesim.sim.memory import memory_report
from stalesim.sim.model import NS, SimHardware, StageCosts, resolve_cuts, stage_costs
from stalesim.sim.result import SimResult, build_result

if TYPE_CHECKING:  # pragma: no cover
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
    ``keep_timeline``: keep the event timeline (needed for traces and plots).
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
    from stalesim.sim.events import (
        busy_in_window,
        compile_schedule,
        program_for,
        schedule_for,
        simulate_program,
    )

    opts = options or SimOptions()
    opts.check()
    if isinstance(schedule, Schedule):
        full: Schedule | None = schedule
        cfg = schedule.config
        phases = list(schedule.phases)
    elif isinstance(schedule, ScheduleConfig):
        full = None
        cfg = resolve(schedule)
        phases = phases_of(cfg)
    else:
        raise StalesimError(f"schedule: expected a ScheduleConfig or Schedule, got {type(schedule).__name__}")
    costs_given = isinstance(workload, StageCosts)
    profile = None if costs_given else workload
    hw = resolve_hardware(hardware, profile)
    if opts.replicas > 1 or hw.cluster is not None:  # data x pipeline on a cluster
        from stalesim.sim.scale import simulate_cluster

        return simulate_cluster(workload, schedule, hw, opts)
    if full is None:
        assert cfg is not None
        if opts.ppv is not None and cfg.stages != len(opts.ppv) + 1:
            raise StalesimError(f"ppv: {len(opts.ppv)} entries give {len(opts.ppv) + 1} stages, "
                                f"but stages is {cfg.stages}")
        if opts.method == "event" and cfg.compute_actions() > MAX_EVENT_ACTIONS:
            raise StalesimError(
                f"batches: an event simulation of about {cfg.compute_actions():,} actions takes minutes "
                f"(at most {MAX_EVENT_ACTIONS:,}); use the closed form (method fast) or fewer batches")
        prog = program_for(cfg) if opts.method == "event" else None
        sched = prog.sched if prog is not None else schedule_for(_short(cfg))
    else:
        sched = full
        prog = compile_schedule(full) if opts.method == "event" else None
    S, N = sched.stages, phases[-1].last if phases else sched.batches
    if costs_given:
        costs = workload  # type: ignore[assignment]
        B = costs.batch_size
        if costs.stages != S:
            raise StalesimError(f"stages: {S} requested, the stage costs have {costs.stages}")
    else:
        if profile is None:
            raise StalesimError("profile: give a profile or stage costs")
        B = opts.batch_size or profile.batch_size
        ab = sched.action_batch_size(B)
        cuts, ppv_used = resolve_cuts(profile, S, opts.ppv, B)
        costs = stage_costs(profile, cuts, batch_size=B, action_batch=ab, loss_s=opts.loss_s, ppv=ppv_used)
    # a user's own order (--schedule-file) has no generator, so no closed form: the event
    # simulation alone times it
    fast = fast_iteration(sched, costs, hw, phases=phases) if phases else None
    if fast is None and prog is None:
        raise StalesimError(f"method: {sched.name!r} is a user's order without a closed form; "
                            "use the event simulation")
    timeline = None
    if prog is not None:
        timeline = simulate_program(prog, costs, hw, workers=sched.workers)
        done = timeline.batch_done
        win = sched.steady_window()
        if win is None or win[1] <= win[0]:  # no steady state: the run's mean, no window
            it = timeline.makespan / N
            lo, hi = 0, timeline.makespan
            window = []
        else:
            k0, k1 = win
            it = (done[k1] - done[k0]) / (k1 - k0)
            lo, hi = done[k0], done[k1]
            window = [k0, k1]
        busy = busy_in_window(timeline, lo, hi)
        span = max(1, hi - lo)
        util = [b / span for b in busy]  # checked/clipped by the plausibility pass
        makespan = timeline.makespan
        phase_end = [done[p.last - 1] / NS for p in phases]
    else:
        assert fast is not None
        it = fast.iteration_ns
        util = [b / it if it else 0.0 for b in fast.busy_ns]  # checked by the plausibility pass
        makespan = fast.makespan_ns
        window = []
        phase_end = []
    mem = memory_report(sched, costs, optimizer_state_factor=opts.optimizer_state_factor,
                        recv_ahead=opts.recv_ahead, gradient_shards=opts.gradient_shards,
                        weight_shards=opts.weight_shards)
    return build_result(
        sched, costs, hw, mem.stages, method=opts.method, microbatches=sched.microbatches,
        workers=sched.workers, devices=sched.num_devices, batches=N, batch_size=B,
        iteration_ns=it, makespan_ns=makespan, utilization=util,
        mean_utilization=sum(util) / len(util) if util else 0.0,
        peak_memory_bytes=mem.peak_bytes, memory_breakdown=mem.breakdown, steady_window=window,
        phases=[dict(asdict(p), **({"end_s": e} if phase_end else {}))
                for p, e in zip(phases, phase_end or [None] * len(phases))],
        timeline=timeline if opts.keep_timeline else None,
        schedule_fingerprint=sched.fingerprint() if prog is not None else None,
        fast_iteration_time_s=None if fast is None else fast.iteration_ns / NS,
        fast_formula="" if fast is None else fast.formula,
        notes=[],
    )


def default_batches(cfg: ScheduleConfig) -> int:
    """Simulation length used when ``cfg.batches`` is None."""
    return get_spec(cfg.schedule).default_batches(cfg)
