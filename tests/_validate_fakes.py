"""Stand-ins for validate's expensive parts, shared by its step tests."""

from __future__ import annotations

from typing import Any


class PassCounter:
    """A stage timer that counts its passes and gives every layout that count as its F time
    (at module level: a round file of :mod:`stalesim.validate.checkpoint` pickles it)."""

    def __init__(self, tcs: list[Any], **_kw: Any) -> None:
        self.tcs, self.passes = list(tcs), 0

    def times(self) -> list[Any]:
        from stalesim.validate.stagetime import StageTimes

        return [StageTimes([{"F": float(self.passes)}]) for _ in self.tcs]
