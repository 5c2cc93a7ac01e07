"""ScheduleSpec: every per-schedule fact a consumer may need, in one place.

Consumers never compare schedule names. They ask the spec (or the built
:class:`~stalesim.schedule.ir.Schedule`, which carries the facts it needs):
does it split batches, is it data-parallel, does every stage have a loss, has
it a steady state, is it free of staleness, which closed form times it, how
long a simulation should run, what its synchronous warm-up runs as, which
extra constraints its configuration must meet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action
from stalesim.schedule.ir import Policy, ScheduleConfig

Generator = Callable[[ScheduleConfig], list[list[Action]]]

# Closed-form families of the simulator's fast path (stalesim.sim.fastpath). ``flush``:
# one flushed batch evaluated exactly (max-plus walk of the device lists, no events),
# the answer for the virtual-stage and split-backward schedules, which have no
# closed form of their own beyond the uniform-cost bubbles tested in the suite.
FAST_PATHS = ("periodic", "fill-drain", "one-f-one-b", "critical-path", "bucketed-allreduce",
              "overlapped-allreduce", "flush")


@dataclass(frozen=True)
class ScheduleSpec:
    """Facts of one registered schedule (see the module doc).

    ``warmup_with``: the staleness-free schedule the first ``warmup`` batches run
    as (None: the schedule is synchronous already, warm-up changes nothing).
    ``switch_to``: the schedule the run continues with after ``switch`` (hybrid).
    ``fast_path``: which closed form of :mod:`stalesim.sim.fastpath` times it.
    ``sim_batches(S, M)``: batches a simulation runs by default (enough for a
    steady state between fill and drain). ``min_microbatches(S)``: the fewest
    micro-batches the order is valid for (``min_micro_rule`` says why, for the
    error message).

    Virtual stages and split backward: ``placement`` is the stage -> device map
    (:mod:`stalesim.schedule.placement`: ``contiguous``, ``loop``, ``v``);
    ``stages_per_device`` the default V, ``fixed_stages_per_device`` whether V
    may differ from it; ``splits_backward`` whether the order runs backwards as
    ``I`` (input gradient) + deferrable ``W`` (weight gradient);
    ``constraint(cfg)`` returns a one-line error for a configuration the order
    is not defined for (None when valid); ``torch_name`` is the
    ``torch.distributed.pipelining`` class that orders the same schedule.
    """

    name: str
    generator: Generator
    summary: str
    source: str
    policy: Policy = Policy.LATEST
    uses_micro: bool = False
    data_parallel: bool = False
    local_loss: bool = False
    staleness_free: bool = True
    warmup_with: str | None = None
    switch_to: str | None = None
    fast_path: str = "periodic"
    sim_batches: Callable[[int, int], int] = lambda S, M: max(16, 8 * S + 16)
    min_microbatches: Callable[[int], int] = lambda S: 1
    min_micro_rule: str = "stages - 1"
    placement: str = "contiguous"
    stages_per_device: int = 1
    fixed_stages_per_device: bool = True
    splits_backward: bool = False
    constraint: Callable[[ScheduleConfig], str | None] | None = None
    torch_name: str | None = None

    @property
    def has_steady_state(self) -> bool:
        """False when the order changes mid-run (a switch): only the run's mean is defined."""
        return self.switch_to is None

    @property
    def placement_free(self) -> bool:
        """The trained model does not depend on the partition: no staleness, one loss."""
        return self.staleness_free and not self.local_loss

    @property
    def switches(self) -> bool:
        return self.switch_to is not None

    def check(self, cfg: ScheduleConfig) -> None:
        """Constraints of this schedule on ``cfg``; ScheduleError names the field."""
        if cfg.microbatches > 1 and not self.uses_micro:
            raise ScheduleError(
                f"microbatches: schedule {self.name!r} does not split batches "
                f"(got microbatches={cfg.microbatches})")
        if cfg.workers > 1 and not self.data_parallel:
            raise ScheduleError(
                f"workers: schedule {self.name!r} is not data-parallel (got workers={cfg.workers})")
        if self.data_parallel and cfg.fold is not None:
            raise ScheduleError(
                f"fold: {self.name!r} places each worker on its own device; stages cannot be folded")
        if cfg.switch is not None and not self.switches:
            raise ScheduleError(f"switch: only a switching schedule (hybrid) takes a switch point, "
                                f"not {self.name!r}")
        V = self.stages_per_device if cfg.stages_per_device is None else cfg.stages_per_device
        if self.stages_per_device != V and (self.fixed_stages_per_device or self.placement == "contiguous"):
            what = ("places one stage per device" if self.stages_per_device == 1
                    else f"places exactly {self.stages_per_device} stages per device")
            raise ScheduleError(f"stages_per_device: schedule {self.name!r} {what} (got {V})")
        if cfg.stages % V:
            raise ScheduleError(
                f"stages_per_device: {V} does not divide stages={cfg.stages} "
                f"(schedule {self.name!r} runs S stages on S / V devices)")
        if cfg.fold is not None and V > 1 and cfg.fold > cfg.stages // V:
            raise ScheduleError(
                f"fold: {cfg.fold} devices for {cfg.stages // V} device(s) of {V} stages each")
        low = self.min_microbatches(cfg.stages)
        if cfg.microbatches < low:
            raise ScheduleError(
                f"microbatches: {self.name} needs microbatches >= {self.min_micro_rule} = {low} "
                f"(got microbatches={cfg.microbatches}, stages={cfg.stages})")
        if self.constraint is not None:
            msg = self.constraint(replace(cfg, stages_per_device=V))
            if msg is not None:
                raise ScheduleError(msg)

    def config(self, *, stages: int = 1, batches: int | None = None, microbatches: int = 1,
               workers: int = 1, **rest: int | None) -> ScheduleConfig:
        """A config of this schedule from a shape shared by a grid of schedules: the
        micro-batches apply only if it splits batches, the workers only if it is
        data-parallel (at least the fewest micro-batches it accepts). For tables and
        sweeps over many schedules; a user's own flags are checked, never dropped."""
        M = max(microbatches, self.min_microbatches(stages)) if self.uses_micro else 1
        if "stages_per_device" not in rest and stages % self.stages_per_device and not self.fixed_stages_per_device:
            rest["stages_per_device"] = 1  # e.g. 3 stages interleave as 3 devices of one chunk
        cfg = ScheduleConfig(self.name, stages=stages, batches=batches, microbatches=M,
                             workers=workers if self.data_parallel else 1, **rest)  # type: ignore[arg-type]
        if self.constraint is not None and self.uses_micro:
            V = cfg.stages_per_device or self.stages_per_device
            for m in range(M, M + 4 * stages + 1):  # the fewest micro-batches the order accepts
                if self.constraint(replace(cfg, microbatches=m, stages_per_device=V)) is None:
                    return replace(cfg, microbatches=m)
        return cfg

    def devices(self, cfg: ScheduleConfig) -> int:
        """Devices before folding: S / V for a pipeline, P workers for data parallelism."""
        if self.data_parallel:
            return cfg.workers
        V = self.stages_per_device if cfg.stages_per_device is None else cfg.stages_per_device
        return cfg.stages // V

    def default_batches(self, cfg: ScheduleConfig) -> int:
        """Simulation length when none is given: the warm-up plus a run long enough
        for the steady state."""
        return min(cfg.warmup, 1 << 16) + self.sim_batches(cfg.stages, cfg.microbatches)
