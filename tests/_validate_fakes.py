"""Stand-ins for validate's expensive parts, shared by its step tests."""

from __future__ import annotations

from typing import Any

from stalesim.validate.stagetime import LayoutTimer as _RealTimer  # before a test puts PassCounter there


class PassCounter:
    """A stage timer that counts its passes and gives every layout that count as its F time
    (its state is the real timer's with no samples, so round files hold what they would)."""

    def __init__(self, tcs: list[Any], **_kw: Any) -> None:
        self.tcs, self.passes = list(tcs), 0

    def state(self) -> dict[str, Any]:
        real = _RealTimer(self.tcs)
        real.passes = self.passes
        return real.state()

    def restore(self, state: dict[str, Any]) -> None:
        self.passes = int(state["passes"])

    def times(self) -> list[Any]:
        from stalesim.validate.stagetime import StageTimes

        return [StageTimes([{"F": float(self.passes)}]) for _ in self.tcs]
