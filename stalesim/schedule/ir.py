"""The schedule container: per-device ordered action lists plus placement.

A :class:`Schedule` is plain data. Generators fill ``device_actions`` with the
compute actions (F, LOSS, B, U, AR/ARW); :mod:`.transforms` joins phases
(synchronous warm-up, hybrid switch) and folds stages onto fewer devices;
:mod:`.lowering` adds the sends and receives; :mod:`.versions` annotates every
F/B with the weight version it reads. The simulator, the emulator and the
executor consume the same object, built by one call
(:func:`stalesim.schedule.build_schedule`) from one :class:`ScheduleConfig`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action, Kind

if TYPE_CHECKING:
    from stalesim.schedule.versions import VersionTable

# Largest schedule the builder accepts: about this many compute actions take a
# few seconds to generate, lower, validate and annotate in pure Python. Larger
# requests are refused up front instead of appearing to hang.
MAX_COMPUTE_ACTIONS = 4_000_000
MAX_DIMENSION = 1 << 20  # any single dimension (stages, batches, micro-batches, workers)


class Policy(str, Enum):
    """Which weight version a backward reads (forwards always read the current one).

    ``latest``: the backward reads the stage's current weights (may be newer than
    the forward's: the stale-weights pipeline). ``stash``: the backward reads the
    version its forward read (PipeDream weight stashing). ``double-buffer``: like
    stash, but the schedule's update placement guarantees at most two versions
    are alive (PipeDream-2BW).
    """

    LATEST = "latest"
    STASH = "stash"
    DOUBLE_BUFFER = "double-buffer"

    def __str__(self) -> str:
        return self.value

    @property
    def backward_reads_forward_version(self) -> bool:
        return self is not Policy.LATEST


def _int_field(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ScheduleError(f"{name}: expected an integer >= {low}, got {value!r}")
    if value > MAX_DIMENSION:
        raise ScheduleError(f"{name}: {value} is larger than this tool handles ({MAX_DIMENSION})")


@dataclass(frozen=True)
class ScheduleConfig:
    """Everything that determines a schedule; :func:`build_schedule` honours every field.

    ``schedule``: registry name. ``batches``: mini-batches of the whole run
    (None: the schedule's default length for a simulation). ``fold``: place the
    S stages contiguously on this many devices (pipeline schedules; None = one
    stage per device). ``switch``: ``hybrid`` only, the batch index at which the
    run drains and continues synchronously (None: half of the batches).
    ``warmup``: the first ``warmup`` batches run synchronously (each schedule's
    staleness-free counterpart, see :class:`~stalesim.schedule.spec.ScheduleSpec`),
    then the schedule proper continues; a no-op for schedules without staleness.
    ``stages_per_device``: V model chunks (virtual stages) per device, so the S
    stages run on S / V devices, placed by the schedule's placement (Megatron's
    loop, s -> s mod R, or the V shape of ZB-V/DualPipeV); None = the schedule's
    default (1 for every schedule without virtual stages).
    """

    schedule: str
    stages: int = 1
    batches: int | None = None
    microbatches: int = 1
    workers: int = 1
    fold: int | None = None
    switch: int | None = None
    warmup: int = 0
    stages_per_device: int | None = None

    def check(self) -> None:
        """Field ranges that hold for every schedule (the spec checks the rest)."""
        if not isinstance(self.schedule, str) or not self.schedule:
            raise ScheduleError(f"schedule: expected a schedule name, got {self.schedule!r}")
        for name in ("stages", "microbatches", "workers"):
            _int_field(name, getattr(self, name), 1)
        if self.batches is not None:
            _int_field("batches", self.batches, 1)
        if self.fold is not None:
            _int_field("fold", self.fold, 1)
            if self.fold > self.stages:
                raise ScheduleError(
                    f"fold: {self.fold} devices for {self.stages} stage(s); a stage runs on one device")
        _int_field("warmup", self.warmup, 0)
        if self.stages_per_device is not None:
            _int_field("stages_per_device", self.stages_per_device, 1)
            if self.stages % self.stages_per_device:
                raise ScheduleError(
                    f"stages_per_device: {self.stages_per_device} does not divide stages={self.stages} "
                    f"(S stages run as S / V devices with V chunks each)")
        if self.switch is not None:
            _int_field("switch", self.switch, 0)
            if self.batches is not None and self.switch > self.batches:
                raise ScheduleError(f"switch: must be in [0, batches={self.batches}], got {self.switch}")
        n = (self.batches or 1) * self.workers * self.stages * (4 * self.microbatches + 1)
        if n > MAX_COMPUTE_ACTIONS:
            raise ScheduleError(
                f"batches x workers x stages x microbatches: about {n:,} actions, more than this tool "
                f"builds ({MAX_COMPUTE_ACTIONS:,}); use fewer batches, stages or micro-batches")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Phase:
    """A run of consecutive batches ``[first, last)`` ordered by one generator.

    A schedule is one phase, or several joined by :mod:`.transforms`: a
    synchronous warm-up before the schedule proper, the hybrid switch from the
    stale pipeline to sequential training.
    """

    schedule: str  # registry name of the generator that ordered these batches
    first: int
    last: int  # exclusive

    @property
    def batches(self) -> int:
        return self.last - self.first


@dataclass
class Schedule:
    """Per-device action lists plus the (worker, stage) -> device placement."""

    name: str
    stages: int
    batches: int
    microbatches: int  # 1 when the schedule does not split batches
    workers: int
    policy: Policy
    device_actions: list[list[Action]]
    placement: list[list[int]]  # placement[worker][stage] -> device
    uses_micro: bool = False  # whether actions carry a micro index
    local_loss: bool = False  # every stage has its own LOSS (local updates)
    data_parallel: bool = False  # P workers each hold every stage; gradients all-reduced
    has_steady_state: bool = True  # False when the order changes mid-run (hybrid switch)
    phases: tuple[Phase, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    config: ScheduleConfig | None = None  # the (resolved) config that built it
    lowered: bool = False
    versions: VersionTable | None = None
    stages_per_device: int = 1  # V chunks (virtual stages) per device before folding
    # (worker, stage, batch, micro) whose backward is split into I and W (the rest run B)
    split_keys: frozenset[tuple[int, int, int, int | None]] = field(default_factory=frozenset)

    @property
    def num_devices(self) -> int:
        return len(self.device_actions)

    @property
    def table(self) -> VersionTable:
        """The version table (every built schedule has one; raw generator output does not)."""
        if self.versions is None:
            raise ScheduleError(f"schedule '{self.name}' has no version table (not built by build_schedule)")
        return self.versions

    def device_of(self, stage: int, worker: int = 0) -> int:
        try:
            return self.placement[worker][stage]
        except IndexError:
            raise ScheduleError(f"no placement for stage {stage} of worker {worker}") from None

    def splits(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> bool:
        """Whether this (micro-)batch's backward on ``stage`` runs as ``I`` + ``W`` (else ``B``)."""
        return (worker, stage, batch, micro) in self.split_keys

    def input_grad_kind(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> Kind:
        """The action that computes this backward's input gradient: ``I`` or ``B``."""
        return Kind.I if (worker, stage, batch, micro) in self.split_keys else Kind.B

    def weight_grad_kind(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> Kind:
        """The action that completes this backward's weight gradient: ``W`` or ``B``."""
        return Kind.W if (worker, stage, batch, micro) in self.split_keys else Kind.B

    @property
    def splits_backward(self) -> bool:
        return bool(self.split_keys)

    def split_stages(self) -> set[tuple[int, int]]:
        """(worker, stage) pairs that run at least one split backward."""
        return {(w, s) for w, s, _t, _m in self.split_keys}

    def micro_indices(self) -> list[int | None]:
        return list(range(self.microbatches)) if self.uses_micro else [None]

    def actions(self) -> list[Action]:
        """All actions, device by device."""
        return [a for acts in self.device_actions for a in acts]

    def stages_on(self, device: int) -> list[tuple[int, int]]:
        """(worker, stage) pairs placed on ``device``."""
        return [
            (w, s)
            for w, row in enumerate(self.placement)
            for s, d in enumerate(row)
            if d == device
        ]

    def has_loss(self, stage: int) -> bool:
        """Whether ``stage`` computes a loss (the last stage, or every stage for local updates)."""
        return self.local_loss or stage == self.stages - 1

    def action_batch_size(self, batch_size: int) -> int:
        """Samples one F/B action processes when a mini-batch has ``batch_size`` samples:
        the worker's shard for data-parallel schedules, the micro-batch when the
        schedule splits batches, else the whole batch."""
        parts = (self.workers if self.data_parallel else 1) * (self.microbatches if self.uses_micro else 1)
        if batch_size % parts:
            what = "workers" if self.data_parallel and self.workers > 1 else "microbatches"
            raise ScheduleError(
                f"batch_size: {batch_size} is not divisible by {what} ({parts}); each shard must be equal")
        return batch_size // parts

    def steady_window(self) -> tuple[int, int] | None:
        """Batches whose completions bound the steady-state window: the middle half of
        the last phase (a warm-up phase is never in it). None when the schedule has no
        steady state (the hybrid switch): then only the whole-run mean is meaningful."""
        if not self.has_steady_state:
            return None
        first, last = (self.phases[-1].first, self.phases[-1].last) if self.phases else (0, self.batches)
        n = last - first
        if n < 4:
            return first, last - 1
        q = n // 4
        return first + q, last - 1 - q

    def fingerprint(self) -> str:
        """SHA-256 of the action lists, placement and policy: two consumers ran the same
        schedule exactly when their fingerprints are equal."""
        payload = json.dumps({
            "name": self.name, "policy": self.policy.value, "placement": self.placement,
            "actions": [[str(a) for a in acts] for acts in self.device_actions],
        }, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schedule": self.name,
            "stages": self.stages,
            "batches": self.batches,
            "microbatches": self.microbatches,
            "workers": self.workers,
            "devices": self.num_devices,
            "policy": self.policy.value,
            "params": dict(self.params),
            "phases": [asdict(p) for p in self.phases],
            "placement": [list(row) for row in self.placement],
            "stages_per_device": self.stages_per_device,
            "actions": {str(d): [str(a) for a in acts] for d, acts in enumerate(self.device_actions)},
        }
        if self.versions is not None:
            out["versions"] = self.versions.rows()
            out["staleness"] = self.versions.staleness()
            out["weight_inconsistent"] = self.versions.inconsistent_stages()
        out["fingerprint"] = self.fingerprint()
        return out
