"""The stage runtime of K runs, their per-run loss and their in-process all-reduce."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from stalesim.runtime.batched.mitigations import BatchedMitigations
from stalesim.runtime.batched.optimizer import BatchedOptimizer
from stalesim.runtime.batched.wide import WideModule
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.mitigations import compress
from stalesim.runtime.stage import StageRuntime, _Inflight


# ------------------------------------------------------------------- the loss
def per_run_loss(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``[K, B, ...]`` outputs and labels -> the ``[K]`` vector of per-run mean losses
    (:func:`stalesim.runtime.tasks.loss_fn` of each run)."""

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        K = out.shape[0]
        flat = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none")
        return flat.view(K, -1).mean(1)

    return loss


# -------------------------------------------------------------------- runtime
class BatchedStageRuntime(StageRuntime):
    """A :class:`StageRuntime` over a :class:`WideModule`: K runs, one version machinery.

    ``cfgs``: the K runs' configurations (``cfg`` = run 0's, for the shared fields);
    ``lr_fn(t)`` returns the K base learning rates of the update fed by batch t.
    ``loss`` returns the K per-run losses (a list), ``lr_for`` K learning rates.
    """

    def __init__(self, module: WideModule, *, cfgs: Sequence[TrainConfig],
                 muon_mask: Sequence[bool] | None = None, **kw: Any) -> None:
        self.cfgs = list(cfgs)
        self._muon_mask = muon_mask  # computed on a run's own stage module (the wide one has other types)
        super().__init__(module, cfg=self.cfgs[0], **kw)
        from stalesim.runtime.tasks import task_of

        self.loss_fn = per_run_loss(task_of(self.cfg))

    def _make_optimizer(self) -> Any:
        return BatchedOptimizer(self.params, self.cfgs, muon_mask=self._muon_mask)

    def _make_mitigations(self) -> Any:
        return BatchedMitigations(self.cfgs, self.schedule, self.stage, self.worker)

    def _keep_loss(self, rec: _Inflight, loss: torch.Tensor) -> torch.Tensor:
        rec.loss = loss.sum()  # d(sum)/d(run k's weights) = run k's gradient
        return loss.detach()

    def lr_for(self, batch: int) -> list[float]:  # type: ignore[override]
        return [a * b for a, b in zip(self.lr_fn(batch), self.mit.lr_factor(batch))]  # type: ignore[call-overload]

    def _error_feedback_applies(self, batch: int) -> bool:
        return any(c.error_feedback for c in self.cfgs) and self.mit.batch_delay(batch) >= 1


# ------------------------------------------------------------------ all-reduce
def compress_runs(t: torch.Tensor, mode: str) -> torch.Tensor:
    """:func:`~stalesim.runtime.mitigations.compress` of each run's slice of a stacked tensor
    (int8's scale is per run and tensor, as in a single run)."""
    if mode != "int8":
        return compress(t, mode)
    return torch.stack([compress(t[k], mode) for k in range(t.shape[0])])


def mean_runs_in_process(buffers: list[list[torch.Tensor]], mode: str) -> None:
    """The emulator's all-reduce of stacked buffers: every worker's buffer becomes the mean
    over workers of the (per-run compressed) buffers, elementwise in the order of
    :func:`stalesim.runtime.allreduce.mean_in_process` (sum over workers, then / P)."""
    if not buffers or not buffers[0]:
        return
    P = len(buffers)
    with torch.no_grad():
        for i in range(len(buffers[0])):
            total = compress_runs(buffers[0][i], mode).clone()
            for b in buffers[1:]:
                total.add_(compress_runs(b[i], mode))
            total.div_(P)
            for b in buffers:
                b[i].copy_(total)


