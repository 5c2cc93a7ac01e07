"""The staleness mitigations with a per-run on/off mask and per-run coefficients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from stalesim.runtime.batched._scalars import _bc, _floats, _mask
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import Mitigations, pipemare_exponent


# ----------------------------------------------------------------- mitigations
class BatchedMitigations(Mitigations):
    """Per-run mitigations (each run's flags and coefficients; the delays are shared)."""

    def __init__(self, cfgs: Sequence[TrainConfig], schedule: Any, stage: int, worker: int = 0) -> None:
        super().__init__(cfgs[0], schedule, stage, worker)
        self.cfgs = list(cfgs)
        self.wp = [bool(c.weight_prediction) for c in cfgs]
        self.pmc = [bool(c.pipemare_correction) for c in cfgs]

    def lr_factor(self, batch: int) -> list[float]:  # type: ignore[override]
        out = []
        D: int | None = None
        for c in self.cfgs:
            f = 1.0
            if c.staleness_lr or c.pipemare_lr:
                D = self.batch_delay(batch) if D is None else D
                if c.staleness_lr:
                    f /= D + 1
                if c.pipemare_lr:
                    f *= max(D, 1) ** (-pipemare_exponent(batch, c.pipemare_warmup))
            out.append(f)
        return out

    @property
    def changes_forward(self) -> bool:
        return any(self.wp)

    @property
    def backward_reuses_forward(self) -> bool:
        # a run without prediction read the stashed version v_F in its slice of the
        # forward's weights (torch.where), so the forward's tensors serve every run
        return any(self.wp) and self.stashes

    @property
    def backward_predicts(self) -> bool:
        return any(self.wp) and not self.stashes

    @property
    def changes_backward(self) -> bool:
        return any(self.wp) or any(self.pmc)

    @property
    def needs_old_weights(self) -> bool:
        return any(self.pmc)

    def _predict(self, weights: list[torch.Tensor], bufs: list[torch.Tensor | None], lr: Sequence[float],
                 horizon: int) -> list[torch.Tensor]:
        if horizon == 0:
            return list(weights)
        out = []
        for w, v in zip(weights, bufs):
            if v is None:
                out.append(w)
                continue
            c = _bc(_floats([lr_k * horizon for lr_k in lr], w), w)
            out.append(torch.where(_mask(self.wp, w), w - c * v, w))
        return out

    def forward_weights(self, live: list[torch.Tensor], bufs: list[torch.Tensor | None],  # type: ignore[override]
                        lr: Sequence[float], batch: int, micro: int | None) -> list[torch.Tensor] | None:
        if not any(self.wp):
            return None
        D = self.delay_forward(batch, micro)
        if D == 0 or all(v is None for v in bufs):
            return None
        return [w.detach() for w in self._predict(live, bufs, lr, D)]

    def backward_weights(self, base: list[torch.Tensor], bufs: list[torch.Tensor | None],  # type: ignore[override]
                         lr: Sequence[float], batch: int, micro: int | None) -> list[torch.Tensor]:
        out = list(base)
        if self.backward_predicts:
            out = self._predict(out, bufs, lr, self.delay_backward(batch, micro))
        if any(self.pmc) and self.delta is not None:
            gap = self.table.gap(self.stage, batch, micro, self.worker)
            if gap:
                out = [torch.where(_mask(self.pmc, w), w - gap * d, w) for w, d in zip(out, self.delta)]
        return out

    def spike_coefficients(self, batch: int) -> tuple[list[float], list[float]]:  # type: ignore[override]
        a, b = [], []
        D: int | None = None
        for c in self.cfgs:
            mu = c.momentum
            if not c.spike_compensation or mu == 0:
                a.append(1.0)
                b.append(0.0)
                continue
            D = self.batch_delay(batch) if D is None else D
            ak = mu**D
            a.append(ak)
            b.append((1.0 - ak) / (1.0 - mu))
        return a, b

    def record_step(self, old: list[torch.Tensor] | None, new: list[torch.Tensor]) -> None:
        if not any(self.pmc) or old is None:
            return
        if self.delta is None:
            self.delta = [torch.zeros_like(w) for w in new]
        for d, o, n in zip(self.delta, old, new):
            g = _bc(_floats([c.pipemare_gamma for c in self.cfgs], d), d)
            d.mul_(g).add_((n - o) * _bc(_floats([1.0 - c.pipemare_gamma for c in self.cfgs], d), d))


