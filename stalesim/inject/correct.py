"""PipeMare's discrepancy correction in a user's loop, through the emulator's own code.

The emulator keeps per stage delta <- gamma delta + (1 - gamma)(w_new - w_old) after every
update (:meth:`stalesim.runtime.mitigations.Mitigations.record_step`) and lets a backward
read w_{v_B} - (v_B - v_F) delta with the delta of its moment, i.e. after v_B updates
(:meth:`Mitigations.backward_weights`; only the latest policy has v_B != v_F). A user's loop
runs that backward at step t, when delta has seen t updates, so delta is kept per version,
as made, while a later backward reads that version, and handed to the same formula.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.schedule import Schedule


class Correction:
    """Per stage: the emulator's Mitigations (the running delta) and delta per kept version."""

    def __init__(self, sched: Schedule, params: Sequence[Sequence[torch.nn.Parameter]],
                 last_read: list[dict[int, int]], gamma: float) -> None:
        cfg = TrainConfig(pipemare_correction=True, pipemare_gamma=gamma)
        self.params = [list(ps) for ps in params]
        self.last_read = last_read
        self.mits = [Mitigations(cfg, sched, s) for s in range(len(self.params))]
        self.deltas: list[dict[int, list[torch.Tensor]]] = [{} for _ in self.params]
        self._old: list[list[torch.Tensor]] = []

    def before_update(self) -> None:
        """The weights the step is about to overwrite (the emulator's ``old``)."""
        self._old = [[p.detach().clone() for p in ps] for ps in self.params]

    def after_update(self, version: int) -> None:
        """Version ``version`` was just made: the emulator's delta update, then keep delta
        where a later backward reads this version; drop those nobody reads any more."""
        for s, (mit, ps) in enumerate(zip(self.mits, self.params)):
            mit.record_step(self._old[s], [p.detach() for p in ps])
            kept = self.deltas[s]
            for v in [v for v in kept if self.last_read[s].get(v, -1) < version]:
                del kept[v]
            if mit.delta is not None and self.last_read[s].get(version, -1) >= version:
                kept[version] = [d.clone() for d in mit.delta]
        self._old = []

    def backward(self, stage: int, base: list[torch.Tensor], v_b: int, t: int, m: int | None) -> list[torch.Tensor]:
        """The weights the backward of (stage, t, m) reads from version v_B's ``base``."""
        mit = self.mits[stage]
        running, mit.delta = mit.delta, self.deltas[stage].get(v_b)
        try:
            none: list[torch.Tensor | None] = [None] * len(base)
            return mit.backward_weights(base, none, 0.0, t, m)  # the lr only scales a prediction: none here
        finally:
            mit.delta = running

    def state_dict(self) -> dict[str, Any]:
        return {"deltas": [dict(kept) for kept in self.deltas], "running": [m.delta for m in self.mits]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.deltas = [{int(v): list(d) for v, d in kept.items()} for kept in state["deltas"]]
        for mit, delta in zip(self.mits, state["running"]):
            mit.delta = None if delta is None else list(delta)
