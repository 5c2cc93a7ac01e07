"""Staleness mitigations shared by the emulator and the executor.

Each is a flag of :class:`~stalesim.runtime.config.TrainConfig`; the delays come
from the schedule's version table, never from a formula for one schedule, so a
mitigation works for every schedule. For stage s and batch t (u = u(s,t)):

- forward delay  D_F = u - 1 - v_F(s,t)  (the staleness), backward delay D_B = u - 1 - v_B(s,t).
- **staleness-aware lr**: eta / (D_F + 1).
- **PipeMare lr rescheduling** (Yang et al., MLSys'21): eta * tau^(-p_k), tau = max(D_F, 1),
  with p_k annealed linearly from 1 to 0 over ``pipemare_warmup`` iterations (p = 0
  afterwards; p = 1 throughout when pipemare_warmup = 0... see ``pipemare_exponent``).
- **PipeMare discrepancy correction**: the backward reads
  w_B - (v_B - v_F) * delta, delta <- gamma delta + (1 - gamma)(w_new - w_old) after
  every update: an extrapolation of the forward's (older) weights from the backward's.
- **weight prediction** (SpecTrain; Kosson et al.'s linear weight prediction; XPipe,
  PipeOptim for Adam): the forward runs on w_hat = w - eta * D_F * v, with v the
  optimizer's next step per unit lr (SGD: the momentum buffer, torch's convention
  v <- mu v + g, w <- w - eta v) at the forward. Under a weight policy that stashes
  (PipeDream, 2BW) the backward reads the same w_hat, as XPipe/PipeOptim do: stashing
  exists so that F and B of a batch read the same weights, and a second prediction at the
  backward (with the state then) would break that. Under the latest policy (stale) the
  backward reads the live weights, predicted as w_B - eta * D_B * v (SpecTrain).
- **spike compensation** (Kosson et al., MLSys'21, "Pipelined Backpropagation at Scale"):
  with delay D the update becomes v <- mu v + g, w <- w - eta (a v + b g) with
  a = mu^D, b = (1 - mu^D) / (1 - mu): the step applies at once the
  contributions plain SGDM would have made during the D missed steps, and later
  steps see the gradient with SGDM's weight mu^(D+k), so the gradient's total
  contribution eta / (1 - mu) is that of SGDM.
- **gradient compression** (Pipe-SGD): fp16 truncation, int8 scalar quantization.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import Schedule


def compress(t: torch.Tensor, mode: str) -> torch.Tensor:
    """Lossy gradient compression as sent over the wire, returned decompressed.

    ``fp16``: round to IEEE half (truncation of the mantissa to 10 bits).
    ``int8``: per-tensor scalar quantization q = round(g / s), s = max|g| / 127,
    q in [-127, 127], decompressed as q * s.
    """
    if mode == "none":
        return t
    if mode == "fp16":
        return t.to(torch.float16).to(t.dtype)
    if mode == "int8":
        # decided on the device (no host read of amax): an all-zero or non-finite tensor is
        # sent as it is, every other one quantized with s = amax / 127
        amax = t.abs().max()
        ok = torch.isfinite(amax) & (amax != 0)
        scale = torch.where(ok, amax / 127.0, 1.0)
        q = torch.clamp(torch.round(t / scale), -127, 127).to(torch.int8)
        return torch.where(ok, q.to(t.dtype) * scale, t)
    raise StalesimError(f"compression: unknown {mode!r}")


def pipemare_exponent(step: int, warmup: int) -> float:
    """PipeMare's p_k: 1 at the start, linearly down to 0 at ``warmup``; 1 if warmup = 0."""
    if warmup <= 0:
        return 1.0
    return max(0.0, 1.0 - step / warmup)


class Mitigations:
    """Per-(worker, stage) mitigation state and formulas (see the module doc)."""

    def __init__(self, cfg: TrainConfig, schedule: Schedule, stage: int, worker: int = 0) -> None:
        self.cfg = cfg
        self.table = schedule.table
        self.stage = stage
        self.worker = worker
        self.micros = schedule.micro_indices()
        self.delta: list[torch.Tensor] | None = None  # PipeMare EMA of weight steps
        self.stashes = schedule.policy.backward_reads_forward_version

    # ---------------------------------------------------------------- delays
    # (the version table answers them; no version arithmetic here)
    def delay_forward(self, batch: int, micro: int | None = None) -> int:
        return self.table.delay_f(self.stage, batch, micro, self.worker)

    def delay_backward(self, batch: int, micro: int | None = None) -> int:
        return self.table.delay_b(self.stage, batch, micro, self.worker)

    def batch_delay(self, batch: int) -> int:
        """D_F of the update fed by ``batch`` (max over its micro-batches)."""
        return self.table.batch_delay(self.stage, batch, self.micros, self.worker)

    # ------------------------------------------------------------------- lr
    def lr_factor(self, batch: int) -> float:
        """Multiplier of the base lr for the update fed by ``batch``."""
        f = 1.0
        if self.cfg.staleness_lr or self.cfg.pipemare_lr:
            D = self.batch_delay(batch)
            if self.cfg.staleness_lr:
                f /= D + 1
            if self.cfg.pipemare_lr:
                p = pipemare_exponent(batch, self.cfg.pipemare_warmup)
                f *= max(D, 1) ** (-p)
        return f

    # -------------------------------------------------------------- weights
    @property
    def changes_forward(self) -> bool:
        return self.cfg.weight_prediction

    @property
    def changes_backward(self) -> bool:
        return self.cfg.weight_prediction or self.cfg.pipemare_correction

    @property
    def backward_reuses_forward(self) -> bool:
        """The backward reads its forward's predicted weights (weight prediction under a
        stashing policy; see the module doc)."""
        return self.cfg.weight_prediction and self.stashes

    @property
    def backward_predicts(self) -> bool:
        """The backward predicts its own weights (weight prediction, latest policy)."""
        return self.cfg.weight_prediction and not self.stashes

    def predict(self, weights: list[torch.Tensor], bufs: list[torch.Tensor | None],
                lr: float, horizon: int) -> list[torch.Tensor]:
        """w - lr * horizon * v per tensor (v = momentum buffer; none yet -> w)."""
        if horizon == 0:
            return list(weights)
        out = []
        for w, v in zip(weights, bufs):
            out.append(w if v is None else w - (lr * horizon) * v)
        return out

    def forward_weights(self, live: list[torch.Tensor], bufs: list[torch.Tensor | None],
                        lr: float, batch: int, micro: int | None) -> list[torch.Tensor] | None:
        """Predicted weights for F(s, batch, micro), or None to use the live ones."""
        if not self.cfg.weight_prediction:
            return None
        D = self.delay_forward(batch, micro)
        if D == 0 or all(v is None for v in bufs):
            return None
        return [w.detach() for w in self.predict(live, bufs, lr, D)]

    def backward_weights(self, base: list[torch.Tensor], bufs: list[torch.Tensor | None],
                         lr: float, batch: int, micro: int | None) -> list[torch.Tensor]:
        """Weights the backward of (batch, micro) reads, given the tensors of version v_B
        (under :attr:`backward_reuses_forward`, the forward's weights: nothing to predict)."""
        out = list(base)
        if self.backward_predicts:
            out = self.predict(out, bufs, lr, self.delay_backward(batch, micro))
        if self.cfg.pipemare_correction and self.delta is not None:
            gap = self.table.gap(self.stage, batch, micro, self.worker)
            if gap:
                out = [w - gap * d for w, d in zip(out, self.delta)]
        return out

    # --------------------------------------------------------------- update
    def spike_coefficients(self, batch: int) -> tuple[float, float]:
        """(a, b) of spike compensation for the update fed by ``batch``; (1, 0) when off."""
        mu = self.cfg.momentum
        if not self.cfg.spike_compensation or mu == 0:
            return 1.0, 0.0
        D = self.batch_delay(batch)
        a = mu**D
        return a, (1.0 - a) / (1.0 - mu)

    def record_step(self, old: list[torch.Tensor] | None, new: list[torch.Tensor]) -> None:
        """PipeMare: delta <- gamma delta + (1 - gamma)(w_new - w_old)."""
        if not self.cfg.pipemare_correction or old is None:
            return
        g = self.cfg.pipemare_gamma
        if self.delta is None:
            self.delta = [torch.zeros_like(w) for w in new]
        for d, o, n in zip(self.delta, old, new):
            d.mul_(g).add_(n - o, alpha=1.0 - g)

    @property
    def needs_old_weights(self) -> bool:
        return self.cfg.pipemare_correction
