"""What a training task is: its loss, its training statistic and its evaluation metric.

Two tasks, chosen from the configuration (:func:`task_of`), the same in the emulator
and the executor:

* ``classify`` (the CNNs): loss = cross-entropy of (B, C) logits against class
  labels; training statistic = top-1 correct; evaluation = test accuracy.
* ``lm`` (the character GPT): loss = next-token cross-entropy averaged over every
  position of every sequence ((B, T, V) logits flattened against (B, T) targets);
  training statistic = next-character top-1 correct; evaluation = mean
  validation loss in nats per character and bits per character (nats / ln 2)
  over the fixed validation windows of :class:`stalesim.runtime.text.TextStream`.

The LOSS action divides by the number of micro-batches M, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F

from stalesim.runtime.devio import to_device

TEXT_DATASETS = ("shakespeare",)
TASKS = ("classify", "lm")

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def task_of(cfg: Any) -> str:
    """``lm`` for a text dataset or a zoo language model, else ``classify``."""
    from stalesim.workloads.names import model_task

    if cfg.dataset in TEXT_DATASETS:
        return "lm"
    return model_task(cfg.model) or "classify"


def _classify_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _lm_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def loss_fn(task: str) -> LossFn:
    """Mean loss of a (micro-)batch for ``task``."""
    return _lm_loss if task == "lm" else _classify_loss


def correct_count(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Top-1 correct predictions of a batch (per class or per next token) as a 0-dim int64
    tensor on the outputs' device: a training loop adds these up without reading them (a
    host read per micro-batch would synchronise a GPU)."""
    return (out.argmax(-1) == y).sum()


def correct(out: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """(top-1 correct predictions, predictions) of a batch (per class or per next token)."""
    return int(correct_count(out, y)), int(y.numel())


@torch.no_grad()
def evaluate(forward: Callable[[torch.Tensor], torch.Tensor],
             batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
             task: str) -> dict[str, float | None]:
    """Run ``forward`` (the model in eval mode) over the evaluation batches.

    ``classify`` -> ``{"test_accuracy"}``; ``lm`` -> ``{"val_loss", "val_bpc"}`` (mean over
    every predicted character; the sum is accumulated in float64).
    """
    # sums stay on the device (float64 adds are the same on every device) and are read once
    if task == "lm":
        total = torch.zeros((), dtype=torch.float64, device=device)
        n = 0
        for x, y in batches:
            out = forward(to_device(x, device))
            total += F.cross_entropy(out.reshape(-1, out.shape[-1]), to_device(y, device).reshape(-1),
                                     reduction="sum").double()
            n += int(y.numel())
        if not n:
            return {"val_loss": None, "val_bpc": None}
        nats = float(total) / n
        return {"val_loss": nats, "val_bpc": nats / math.log(2)}
    good = torch.zeros((), dtype=torch.int64, device=device)
    seen = 0
    for x, y in batches:
        good += correct_count(forward(to_device(x, device)), to_device(y, device))
        seen += int(y.numel())
    return {"test_accuracy": int(good) / seen if seen else None}


@torch.no_grad()
def evaluate_runs(forward: Callable[[torch.Tensor], torch.Tensor],
                  batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
                  task: str, runs: int) -> list[dict[str, float | None]]:
    """:func:`evaluate` for K runs at once: ``forward`` maps ``[K, B, ...]`` inputs to
    ``[K, B, ...]`` outputs and ``batches`` yields run-stacked batches; the metric of run k
    is computed from its slice exactly as :func:`evaluate` computes a single run's."""
    if task == "lm":
        totals = [torch.zeros((), dtype=torch.float64) for _ in range(runs)]
        n = 0
        for x, y in batches:
            out = forward(x.to(device))
            y = y.to(device)
            for k in range(runs):
                totals[k] += F.cross_entropy(out[k].reshape(-1, out.shape[-1]), y[k].reshape(-1),
                                             reduction="sum").double().cpu()
            n += int(y[0].numel())
        if not n:
            return [{"val_loss": None, "val_bpc": None} for _ in range(runs)]
        return [{"val_loss": float(tk) / n, "val_bpc": float(tk) / n / math.log(2)} for tk in totals]
    good = [0] * runs
    seen = 0
    for x, y in batches:
        out = forward(x.to(device)).cpu()
        for k in range(runs):
            good[k] += correct(out[k], y[k])[0]
        seen += int(y[0].numel())
    return [{"test_accuracy": g / seen if seen else None} for g in good]
