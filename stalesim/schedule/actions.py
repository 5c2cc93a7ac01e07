"""Actions: the instructions of the schedule IR, and their compact text form.

An action is one thing one device does: a forward ``F`` or backward ``B`` of a
stage on a (micro-)batch, or the backward split in two (``I``: the input
gradient, sent to the previous stage; ``W``: the weight gradient, deferrable),
a ``LOSS``, an optimizer update ``U``, a point-to-point ``SEND_*``/``RECV_*``,
or the start/wait of a gradient all-reduce ``AR``/``ARW``. A (stage, batch,
micro) runs either ``B`` or ``I`` then ``W``, never both.

Text form (round-trips through :meth:`Action.parse`)::

    [w<worker>:]<stage><KIND><batch>[.<micro>][v<version>]

``1F3`` is stage 1's forward of batch 3, ``0B3.2v1`` the backward of stage 0 on
micro-batch 2 of batch 3 reading weight version 1, ``w2:0AR5`` worker 2 starting
the all-reduce of stage 0's batch-5 gradient. The worker prefix appears only for
data-parallel replicas (worker != 0), the micro suffix only when the schedule
splits batches, the version only on F/B once the version pass has run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum

from stalesim.errors import ScheduleError


class Kind(str, Enum):
    """Action kinds. The string value is the text form's KIND."""

    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - the input-gradient half of a split backward (torch's name)
    W = "W"
    U = "U"
    LOSS = "LOSS"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    AR = "AR"
    ARW = "ARW"

    def __str__(self) -> str:  # keeps f-strings short: f"{kind}" == "F"
        return self.value


COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W, Kind.U, Kind.LOSS})
# the same set as the text the executor's rows and traces carry ("F", "I", ...)
COMPUTE_KIND_NAMES = frozenset(k.value for k in COMPUTE_KINDS)
# kinds that produce the input gradient (what SEND_B carries) and kinds that complete
# the weight gradient (what U and AR wait for)
INPUT_GRAD_KINDS = frozenset({Kind.B, Kind.I})
WEIGHT_GRAD_KINDS = frozenset({Kind.B, Kind.W})
COMM_KINDS = frozenset({Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B})
COLLECTIVE_KINDS = frozenset({Kind.AR, Kind.ARW})
# everything the communication path runs, point-to-point and collective: what a trace
# draws on the comm track and what the runtime's per-message costs are calibrated for
TRANSFER_KINDS = COMM_KINDS | COLLECTIVE_KINDS
# kinds that read a weight version (annotated by stalesim.schedule.versions once its
# pass has run): the forward and every form of the backward
VERSIONED_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})

# Ordered forms, for output and position-indexed tables (the simulator's kind codes,
# StageCosts' per-kind cost tables): their order is part of every printed row and
# stored table, so it is fixed here once.
# The halves of a split backward (input gradient, then weight gradient).
SPLIT_BACKWARD_KINDS = (Kind.I, Kind.W)
# The compute kinds of a schedule that splits no backward, in enum order (F, B, U,
# LOSS): what the 1-rank calibration measures and what reports print per kind.
UNSPLIT_COMPUTE_NAMES = tuple(k.value for k in Kind if k in COMPUTE_KINDS and k not in SPLIT_BACKWARD_KINDS)
# Every compute kind: the unsplit ones, then I and W (the order the cost tables grew in).
COMPUTE_NAMES_ORDERED = UNSPLIT_COMPUTE_NAMES + tuple(k.value for k in SPLIT_BACKWARD_KINDS)
# Every transfer kind: sends before receives, forward before backward, then the
# all-reduce start and wait (the order of the per-kind communication cost tables).
TRANSFER_NAMES_ORDERED = tuple(k.value for k in (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B,
                                                 Kind.AR, Kind.ARW))

# Longest alternatives first so that "ARW" is not read as "AR" + "W...".
_KIND_ALT = "|".join(sorted((k.value for k in Kind), key=len, reverse=True))
_TEXT_RE = re.compile(
    rf"^(?:w(?P<worker>\d+):)?(?P<stage>\d+)(?P<kind>{_KIND_ALT})(?P<batch>\d+)"
    r"(?:\.(?P<micro>\d+))?(?:v(?P<version>\d+))?$"
)

ActionKey = tuple[Kind, int, int, int, "int | None"]


@dataclass(frozen=True, slots=True)
class Action:
    """One instruction. Frozen and hashable; ``key`` ignores the version annotation."""

    kind: Kind
    stage: int
    batch: int
    micro: int | None = None
    worker: int = 0
    version: int | None = None

    @property
    def key(self) -> ActionKey:
        """Identity of the action regardless of its version annotation."""
        return (self.kind, self.worker, self.stage, self.batch, self.micro)

    def with_version(self, version: int | None) -> Action:
        return replace(self, version=version)

    def __str__(self) -> str:
        text = f"{self.stage}{self.kind.value}{self.batch}"
        if self.micro is not None:
            text += f".{self.micro}"
        if self.version is not None:
            text += f"v{self.version}"
        if self.worker:
            text = f"w{self.worker}:{text}"
        return text

    @classmethod
    def parse(cls, text: str) -> Action:
        """Inverse of ``str()``; raises ScheduleError naming the text it cannot read."""
        match = _TEXT_RE.match(text.strip())
        if match is None:
            raise ScheduleError(f"cannot parse action {text!r} (expected e.g. '1F3', '0B3.2v1', '1I0.3', 'w1:0AR5')")
        g = match.groupdict()
        return cls(
            kind=Kind(g["kind"]),
            stage=int(g["stage"]),
            batch=int(g["batch"]),
            micro=None if g["micro"] is None else int(g["micro"]),
            worker=int(g["worker"] or 0),
            version=None if g["version"] is None else int(g["version"]),
        )


def act(kind: Kind, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> Action:
    """Short constructor used by the generators."""
    return Action(kind, stage, batch, micro, worker)
