"""What an emulation reports: its summary, the versions it used, its memory, its evaluation.

Functions apart from the replay engine because they read the finished (or paused) run
and change nothing in it, and the single and the batched emulation build their
:class:`~stalesim.summary.RunSummary` records (one, or one per run) from the same
pieces: the epoch records plus a final evaluation, the weight versions every action
read, the peak bytes in flight, and the stages of one worker run as one model in
evaluation mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Schedule
from stalesim.summary import RunSummary, config_fields, schedule_fields, version_facts

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.emulator.engine import ReplayEngine


def versions_log(runtimes: Mapping[tuple[int, int], StageRuntime]) -> list[dict[str, Any]]:
    """Every action's weight version, per (worker, stage) runtime (``versions.jsonl``)."""
    out = []
    for (r, s), rt in runtimes.items():
        for text, v in rt.versions_used:
            out.append({"worker": r, "stage": s, "action": text, "version": v})
    return out


def used_version_facts(sched: Schedule, runtimes: Mapping[tuple[int, int], StageRuntime]) -> dict[str, Any]:
    """The summary's version fields (:func:`stalesim.summary.version_facts`): the IR's and
    the measured staleness, and whether every action used the IR's version."""
    return version_facts(sched, (u for rt in runtimes.values() for u in rt.versions_used))


def inflight_bytes(runtimes: Iterable[StageRuntime]) -> int:
    """Bytes held now for the backwards to come: the weight-version stashes and the inputs of
    the forwards in flight (and of the deferred weight gradients)."""
    rts = list(runtimes)
    b = sum(r.stash_bytes() for r in rts)
    b += sum(rec.x.numel() * rec.x.element_size() for r in rts
             for rec in [*r.inflight.values(), *r.deferred.values()])
    return b


def metric_key(task: str) -> str:
    """The evaluation metric of a task: validation loss (LM) or test accuracy."""
    return "val_loss" if task == "lm" else "test_accuracy"


def eval_batch_size(task: str) -> int:
    return 64 if task == "lm" else 1000


@contextmanager
def eval_model(mods: list[torch.nn.Module]) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
    """One worker's stages as one forward in eval mode (train mode again after)."""
    for m in mods:
        m.eval()

    def forward(x: torch.Tensor) -> torch.Tensor:
        for m in mods:
            x = m(x)
        return x

    try:
        yield forward
    finally:
        for m in mods:
            m.train()


def final_epochs(task: str, cfg: TrainConfig, epochs: list[dict[str, Any]], diverged: bool,
                 metrics: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """The epoch records plus a final evaluation (``{"epoch": None, ...}``) when the run
    did not end on an epoch's own (diverged runs are not evaluated)."""
    key = metric_key(task)
    epochs = list(epochs)
    if not diverged and (not epochs or cfg.epochs is None):
        m = metrics()
        if m.get(key) is not None and (not epochs or epochs[-1].get(key) is None):
            epochs.append({"epoch": None, **m})
    return epochs


def run_summary(engine: ReplayEngine, cfg: TrainConfig, *, losses: list[float], diverged_at: int | None,
                epochs: list[dict[str, Any]], data_note: str | None, facts: dict[str, Any],
                stash_peak_bytes: int, inflight_peak_bytes: int, wall_time_s: float,
                batched: int | None = None) -> RunSummary:
    """One run's :class:`~stalesim.summary.RunSummary` (also each run of a batch)."""
    final = epochs[-1] if epochs and diverged_at is None else {}
    return RunSummary(
        producer="emulate", **schedule_fields(engine.sched), **config_fields(cfg), **facts,
        task=engine.task, data_note=data_note, device_kind=engine.device.type, ppv=engine.ppv,
        iterations=engine.horizon, batches_per_epoch=engine.bpe, batched=batched,
        run_dir=None if engine.out is None else str(engine.out),
        steps_done=len(losses), losses=[x if math.isfinite(x) else None for x in losses],
        final_loss=losses[-1] if losses and math.isfinite(losses[-1]) else None,
        diverged=diverged_at is not None, diverged_at=diverged_at,
        final_test_accuracy=final.get("test_accuracy"), final_val_loss=final.get("val_loss"),
        final_val_bpc=final.get("val_bpc"), epoch_metrics=epochs,
        wall_s=engine.replay_s, wall_time_s=wall_time_s,
        stash_peak_bytes=stash_peak_bytes, inflight_peak_bytes=inflight_peak_bytes)
