"""The tally: the replay's training numbers, from LOSS values on the device to logged records.

Its own module because reading a device value is a host synchronisation: the LOSS
values and correct-prediction counts are queued as device tensors and read in one go
every ``read_every`` completed batches (and at epoch ends, checkpoints and the end of
the replay), so the losses, training accuracy, divergence and ``metrics.jsonl`` records
are kept apart from the actions that produce them. :class:`Tally` keeps one run's
numbers, :class:`BatchedTally` the K runs of a batched emulation (a run that diverges
stops being logged at that step, the others go on). The float arithmetic is the
per-LOSS one in LOSS order, so the numbers do not depend on when they are read.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch

from stalesim.atomic import AppendLog
from stalesim.emulator.state import BatchedRunState, RunState
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.devio import read_values
from stalesim.runtime.tasks import correct_count


class TallyBase(ABC):
    """The read queue shared by both tallies; the subclasses add the numbers one way or K ways.

    ``losses_per_batch``: the last-stage LOSS actions of one batch (it is complete after the
    last); ``clock``: seconds of the run so far (a completed batch's ``wall_time_s``)."""

    state: RunState[Any, Any]

    def __init__(self, *, bpe: int, total: int, workers: int, losses_per_batch: int, read_every: int,
                 clock: Callable[[], float]) -> None:
        self.bpe, self.total, self.workers = bpe, total, workers
        self.losses_per_batch = losses_per_batch
        self.read_every = read_every
        self.clock = clock
        #: the open ``metrics.jsonl`` logs (one per run) while a run folder is written
        self.logs: list[AppendLog] | None = None
        #: a live TensorBoard writer of the (one) run's records, flushed at each read
        #: (:class:`stalesim.launch.tb_scalars.RunScalars`; ``emulate --tensorboard``)
        self.live: Any = None
        # device values queued for the next read: LOSS values by batch, correct counts by
        # epoch, completed batches with the time they completed
        self._queued_losses: list[tuple[int, torch.Tensor]] = []
        self._queued_correct: list[tuple[int, torch.Tensor]] = []
        self._completed: list[tuple[int, float]] = []

    def record(self, t: int, out: torch.Tensor, y: torch.Tensor, value: torch.Tensor) -> None:
        """A last-stage LOSS of batch t ran: ``out`` its stage output, ``y`` its labels,
        ``value`` the loss (unread)."""
        ep = t // self.bpe
        with torch.no_grad():  # per class, or per next character
            self._queued_correct.append((ep, self._correct(out, y)))
        self._add_seen(ep, y)
        self._queue_loss(t, value)

    def _queue_loss(self, t: int, value: torch.Tensor) -> None:
        """Queue one LOSS value of batch t (unread); a batch is complete after its last LOSS,
        and every ``read_every`` complete batches the queue is read."""
        st = self.state
        self._queued_losses.append((t, value))
        st.loss_count[t] = st.loss_count.get(t, 0) + 1
        if st.loss_count[t] == self.losses_per_batch:
            del st.loss_count[t]
            self._completed.append((t, round(self.clock(), 4)))
            if len(self._completed) >= self.read_every:
                self.read_out()

    def read_out(self) -> None:
        """Read every queued value in one go and log the completed batches in order.

        A non-finite loss sets ``diverged_at``; the batches completed after it are not logged
        (with ``read_every`` > 1 the replay ran up to that many batches past the divergence)."""
        if not (self._queued_losses or self._queued_correct or self._completed):
            return
        nl = len(self._queued_losses)
        vals = read_values([v for _, v in self._queued_losses] + [c for _, c in self._queued_correct])
        for (t, _), v in zip(self._queued_losses, vals[:nl]):
            self._add_loss(t, v)
        for (ep, _), c in zip(self._queued_correct, vals[nl:]):
            self._add_correct(ep, c)
        done = self._completed
        self._queued_losses, self._queued_correct, self._completed = [], [], []
        for t, now in done:
            if self.state.diverged_at is not None:
                break
            self._complete_batch(t, now)
        if self.live is not None:  # the read is the logging interval: TensorBoard sees it now
            self.live.flush()

    def close_logs(self) -> None:
        """Close the ``metrics.jsonl`` logs (at the end of a run, or when it fails)."""
        for fh in self.logs or []:
            fh.close()
        self.logs = None

    def _write(self, run: int, rec: dict[str, Any]) -> None:
        if self.logs is not None:
            self.logs[run].write_line(json.dumps(rec))
        if self.live is not None:
            self.live.record(rec)

    # the numbers, one run or K runs
    @abstractmethod
    def _correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ...

    @abstractmethod
    def _add_seen(self, ep: int, y: torch.Tensor) -> None:
        ...

    @abstractmethod
    def _add_loss(self, t: int, value: list[Any]) -> None:
        ...

    @abstractmethod
    def _add_correct(self, ep: int, count: list[Any]) -> None:
        ...

    @abstractmethod
    def _complete_batch(self, t: int, now: float) -> None:
        ...

    @abstractmethod
    def end_epoch(self, epoch: int) -> None:
        """Evaluate and log the end of epoch ``epoch`` (its numbers were read just before)."""
        ...


class Tally(TallyBase):
    """One run's numbers (``metrics.jsonl``: one record per batch and per epoch)."""

    def __init__(self, state: RunState[float, int], cfg: TrainConfig,
                 evaluate: Callable[[], dict[str, float | None]], **kw: Any) -> None:
        super().__init__(**kw)
        self.state: RunState[float, int] = state
        self.cfg = cfg
        self.evaluate = evaluate

    def _correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return correct_count(out, y)

    def _add_seen(self, ep: int, y: torch.Tensor) -> None:
        self.state.seen[ep] = self.state.seen.get(ep, 0) + int(y.numel())

    def _add_loss(self, t: int, value: list[Any]) -> None:
        st = self.state
        st.loss_parts[t] = st.loss_parts.get(t, 0.0) + value[0] / self.workers

    def _add_correct(self, ep: int, count: list[Any]) -> None:
        st = self.state
        st.correct[ep] = st.correct.get(ep, 0) + count[0]

    def _complete_batch(self, t: int, now: float) -> None:
        st = self.state
        loss = st.loss_parts.pop(t)
        st.losses[t] = loss
        rec = {"step": t, "epoch": t // self.bpe, "loss": loss if math.isfinite(loss) else None,
               "lr": self.cfg.lr_at(t, self.total), "wall_time_s": now}
        st.metrics.append(rec)
        self._write(0, rec)
        if not math.isfinite(loss) and st.diverged_at is None:
            st.diverged_at = t

    def end_epoch(self, epoch: int) -> None:
        """Log epoch ``epoch``'s training accuracy and evaluation metrics."""
        st = self.state
        metrics = self.evaluate()
        train_acc = st.correct.pop(epoch, 0) / max(st.seen.pop(epoch, 1), 1)
        rec = {"epoch": epoch, "train_accuracy": train_acc, **metrics,
               "wall_time_s": round(self.clock(), 4)}
        st.epochs.append(rec)
        st.metrics.append(rec)
        self._write(0, rec)


class BatchedTally(TallyBase):
    """K runs' numbers: per-run lists in a :class:`~stalesim.emulator.state.BatchedRunState`,
    one ``metrics.jsonl`` per run; ``diverged_at`` is set once every run diverged."""

    def __init__(self, state: BatchedRunState, cfgs: Sequence[TrainConfig],
                 evaluate: Callable[[], list[dict[str, float | None]]], **kw: Any) -> None:
        super().__init__(**kw)
        self.state: BatchedRunState = state
        self.cfgs = list(cfgs)
        self.evaluate = evaluate
        self.runs = len(self.cfgs)

    def _correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(-1) == y).reshape(self.runs, -1).sum(1)

    def _add_seen(self, ep: int, y: torch.Tensor) -> None:
        seen = self.state.seen.setdefault(ep, [0] * self.runs)
        for k in range(self.runs):
            seen[k] += int(y[k].numel())

    def _add_loss(self, t: int, value: list[Any]) -> None:
        parts = self.state.loss_parts.setdefault(t, [0.0] * self.runs)
        for k in range(self.runs):
            parts[k] = parts[k] + value[k] / self.workers

    def _add_correct(self, ep: int, count: list[Any]) -> None:
        corr = self.state.correct.setdefault(ep, [0] * self.runs)
        for k in range(self.runs):
            corr[k] += int(count[k])

    def _complete_batch(self, t: int, now: float) -> None:
        st = self.state
        losses = st.loss_parts.pop(t)
        st.losses[t] = losses
        for k, c in enumerate(self.cfgs):
            if not self.alive(k, t):
                continue
            x = losses[k]
            rec = {"step": t, "epoch": t // self.bpe, "loss": x if math.isfinite(x) else None,
                   "lr": c.lr_at(t, self.total), "wall_time_s": now}
            st.run_metrics[k].append(rec)
            self._write(k, rec)
        for k, x in enumerate(losses):
            if not math.isfinite(x) and st.run_diverged_at[k] is None:
                st.run_diverged_at[k] = t
        if st.diverged_at is None and all(d is not None for d in st.run_diverged_at):
            st.diverged_at = t

    def alive(self, k: int, t: int) -> bool:
        """Run k still logs batch t (a diverged run stops at the batch it diverged on)."""
        d = self.state.run_diverged_at[k]
        return d is None or t <= d

    def end_epoch(self, epoch: int) -> None:
        """Log epoch ``epoch``'s training accuracy and evaluation metrics of every live run."""
        st = self.state
        metrics = self.evaluate()
        correct = st.correct.pop(epoch, [0] * self.runs)
        seen = st.seen.pop(epoch, [1] * self.runs)
        now = round(self.clock(), 4)
        for k in range(self.runs):
            if st.run_diverged_at[k] is not None:
                continue
            rec = {"epoch": epoch, "train_accuracy": correct[k] / max(seen[k], 1), **metrics[k],
                   "wall_time_s": now}
            st.run_epochs[k].append(rec)
            st.run_metrics[k].append(rec)
            self._write(k, rec)
