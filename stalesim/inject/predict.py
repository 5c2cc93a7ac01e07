"""Weight prediction in a user's loop, through the emulator's own code.

The emulator's forward of (s, t) predicts from the live weights w (version v_F) along the
optimizer's direction at that moment: w_hat = w - lr * D_F * d
(:meth:`stalesim.runtime.mitigations.Mitigations.forward_weights`, d from
:meth:`stalesim.runtime.optim.StageOptimizer.directions`: SGD's momentum buffer, Adam's
m_hat / (sqrt(v_hat) + eps), AdamW's plus wd * w). Under a stashing policy the backward
reuses w_hat; under the latest policy it predicts from version v_B over D_B with the
direction of v_B's time (:meth:`Mitigations.backward_weights`).

A user's loop runs the forward of batch t at step t, when the optimizer has already
taken t updates, not v_F. So the direction of version n is taken when version n is made
(at the start, and after each step), kept while a later pass reads it (the same
``last_read`` rule as the weight copies), and handed to the emulator's formulas with the
weights of that version. The direction is computed by ``StageOptimizer.directions`` on the
user's optimizer (its state is per parameter, so a stage's slice of it is that stage's
optimizer); SGD, Adam and AdamW only (the kinds ``directions`` defines).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations
from stalesim.runtime.optim import StageOptimizer
from stalesim.schedule import Schedule

#: The user's optimizer classes whose direction ``StageOptimizer.directions`` defines.
KINDS: dict[type[torch.optim.Optimizer], str] = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam",
                                                 torch.optim.AdamW: "adamw"}


def _config(optimizer: torch.optim.Optimizer) -> TrainConfig:
    """The optimizer's kind and hyper-parameters as the emulator's config names them."""
    kind = KINDS.get(type(optimizer))
    if kind is None:
        raise StalesimError(f"weight_prediction: needs SGD, Adam or AdamW (their next step is defined), got "
                            f"{type(optimizer).__name__}")
    g = optimizer.param_groups[0]
    for i, other in enumerate(optimizer.param_groups):
        for key in ("betas", "eps", "weight_decay", "momentum", "nesterov", "amsgrad", "maximize"):
            if other.get(key) != g.get(key):
                raise StalesimError(f"weight_prediction: param group {i} has another {key} than group 0")
    if g.get("nesterov") or g.get("amsgrad") or g.get("maximize"):
        raise StalesimError("weight_prediction: defined for plain SGD momentum, Adam and AdamW (no nesterov, "
                            "amsgrad or maximize)")
    if kind == "sgd" and not g["momentum"]:
        raise StalesimError("weight_prediction: with SGD it extrapolates along the momentum buffer; set momentum")
    betas = tuple(g.get("betas", (0.9, 0.999)))
    return TrainConfig(optimizer=kind, weight_prediction=True, momentum=g.get("momentum", 0.0),
                       betas=[float(betas[0]), float(betas[1])], eps=float(g.get("eps", 1e-8)),
                       weight_decay=float(g["weight_decay"]))


class Prediction:
    """Per stage: the directions of the versions still read, and the emulator's formulas."""

    def __init__(self, sched: Schedule, params: Sequence[Sequence[torch.nn.Parameter]],
                 last_read: list[dict[int, int]]) -> None:
        self.sched = sched
        self.params = [list(ps) for ps in params]
        self.last_read = last_read
        self.mits: list[Mitigations] = []
        self.shells: list[StageOptimizer] = []
        self.dirs: list[dict[int, list[torch.Tensor | None]]] = [{} for _ in self.params]
        self.lr_of: dict[int, int] = {}  # id(param) -> param group index

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer``'s state: one StageOptimizer per stage over it (no optimizer of its own)."""
        cfg = _config(optimizer)
        self.mits = [Mitigations(cfg, self.sched, s) for s in range(len(self.params))]
        self.shells = []
        for ps in self.params:
            shell = StageOptimizer([], cfg)  # no parameters: builds no torch optimizer
            shell.params, shell.torch = list(ps), optimizer
            self.shells.append(shell)
        self.lr_of = {id(p): i for i, g in enumerate(optimizer.param_groups) for p in g["params"]}
        self.optimizer = optimizer
        self.record(0)

    def record(self, version: int) -> None:
        """Version ``version`` was just made: keep each stage's direction if a later pass
        reads that version, drop those no later pass reads."""
        for s, ps in enumerate(self.params):
            kept = self.dirs[s]
            for v in [v for v in kept if self.last_read[s].get(v, -1) < version]:
                del kept[v]
            if self.last_read[s].get(version, -1) >= version:
                shell = self.shells[s]
                shell.steps = version
                live = [p.detach() for p in ps]
                kept[version] = [None if d is None else d.clone() for d in shell.directions(live)]

    def lr(self, stage: int) -> float:
        """The lr of the stage's parameters now (the batch's base lr, as the emulator's lr_fn)."""
        groups = self.optimizer.param_groups
        lrs = {float(groups[self.lr_of[id(p)]]["lr"]) for p in self.params[stage]}
        if len(lrs) != 1:
            raise StalesimError(f"weight_prediction: stage {stage}'s parameters have learning rates {sorted(lrs)}; "
                                f"the prediction takes one per stage")
        return lrs.pop()

    def forward(self, stage: int, weights: list[torch.Tensor], v_f: int, t: int, m: int | None, lr: float
                ) -> list[torch.Tensor] | None:
        """The predicted forward weights of (stage, t, m) from version ``v_f``, or None."""
        return self.mits[stage].forward_weights(weights, self.dirs[stage][v_f], lr, t, m)

    def backward(self, stage: int, base: list[torch.Tensor], v_b: int, t: int, m: int | None, lr: float
                 ) -> list[torch.Tensor]:
        """The weights the backward of (stage, t, m) reads, from ``base`` (version v_B, or the
        forward's prediction where the backward reuses it)."""
        mit = self.mits[stage]
        none: list[torch.Tensor | None] = [None] * len(base)
        dirs = self.dirs[stage][v_b] if mit.backward_predicts else none
        return mit.backward_weights(base, dirs, lr, t, m)
