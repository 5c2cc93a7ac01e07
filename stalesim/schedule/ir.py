"""The schedule container: per-device ordered action lists plus placement.

A :class:`Schedule` is plain data. Generators fill ``device_actions`` with the
compute actions (F, LOSS, B, U, AR/ARW); :mod:`.lowering` adds the sends and
receives; :mod:`.versions` annotates every F/B with the weight version it reads.
The simulator, the emulator and the executor consume the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action

if TYPE_CHECKING:
    from stalesim.schedule.versions import VersionTable


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


@dataclass(frozen=True)
class ScheduleConfig:
    """Parameters every generator draws from (each uses the ones it needs).

    ``devices``: for pipeline schedules, how many devices the S stages are folded
    onto (default S, one stage per device); data-parallel schedules always use one
    device per worker. ``switch``: for ``hybrid``, the number of batches run
    stale-pipelined before the drain. ``warmup``: for ``pipe-sgd``, synchronous
    warm-up iterations.
    """

    stages: int = 1
    batches: int = 8
    microbatches: int = 1
    workers: int = 1
    devices: int | None = None
    switch: int | None = None
    warmup: int = 0

    def check(self) -> None:
        for name in ("stages", "batches", "microbatches", "workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ScheduleError(f"{name} must be an integer >= 1, got {value!r}")
        if self.devices is not None and (not isinstance(self.devices, int) or self.devices < 1):
            raise ScheduleError(f"devices must be an integer >= 1, got {self.devices!r}")
        if self.devices is not None and self.devices > self.stages:
            raise ScheduleError(
                f"devices={self.devices} is more than stages={self.stages}: a stage runs on one device"
            )
        if self.warmup < 0:
            raise ScheduleError(f"warmup must be >= 0, got {self.warmup}")
        if self.switch is not None and not 0 <= self.switch <= self.batches:
            raise ScheduleError(f"switch must be in [0, batches={self.batches}], got {self.switch}")


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
    params: dict[str, Any] = field(default_factory=dict)
    lowered: bool = False
    versions: VersionTable | None = None

    @property
    def num_devices(self) -> int:
        return len(self.device_actions)

    def device_of(self, stage: int, worker: int = 0) -> int:
        try:
            return self.placement[worker][stage]
        except IndexError:
            raise ScheduleError(f"no placement for stage {stage} of worker {worker}") from None

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
            "placement": [list(row) for row in self.placement],
            "actions": {str(d): [str(a) for a in acts] for d, acts in enumerate(self.device_actions)},
        }
        if self.versions is not None:
            out["versions"] = self.versions.rows()
            out["staleness"] = self.versions.staleness()
            out["weight_inconsistent"] = self.versions.inconsistent_stages()
        return out
