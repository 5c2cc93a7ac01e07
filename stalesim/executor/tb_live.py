"""``run --tensorboard DIR``: the per-step loss written live by the rank that computes it.

The run's loss lives on the rank holding worker 0's last stage (the loss stage; with
several pipelines, the first one's); that rank alone writes, through the same
:class:`stalesim.launch.tb_scalars.RunScalars` ``emulate --tensorboard`` uses, so run and
emulate curves carry the same tags. Nothing goes over the process group (NCCL pairs
collectives by order on every rank; a write on one rank must never add one): the other
workers' losses are not averaged in, so with P > 1 workers the curve is worker 0's loss,
tagged ``train/loss_worker0`` rather than ``train/loss`` (the run's recorded loss is the
mean over workers, gathered only at the end).

A batch's loss is complete after its last micro-batch's LOSS action on this rank. Reading
it is a host read (on a GPU, a wait for everything queued), so completed batches are
queued and read every ``every`` of them (1 on the CPU), then written and flushed.
``train/step_time_s`` is the wall time between consecutive batches' last LOSS on this rank.

A resumed run's writer purges the earlier attempt's points from its first new batch on, which
TensorBoard applies only if the new event file's name sorts after the earlier one's; the
resumed rank is another process, whose pid may sort first within one second, so the writer
opens only after :func:`stalesim.tbevents.wait_past` has moved past the folder's newest file.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.schedule import Action, Kind, Schedule

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.spec import Job


class LiveLoss:
    """The loss-stage rank's live TensorBoard writer (:func:`live_loss` makes it)."""

    def __init__(self, folder: Path, losses: Mapping[Hashable, float], *, stage: int, workers: int,
                 remaining: Counter[int], every: int, last_step: int, purge_step: int | None) -> None:
        from stalesim.launch.tb_scalars import RunScalars
        from stalesim.tbevents import newest_second, wait_past

        self.losses, self.stage, self.workers = losses, stage, workers
        self.remaining = remaining  # batch -> LOSS actions of worker 0's loss stage still to run
        self.every = max(int(every), 1)
        self.pending: list[tuple[int, float]] = []  # (batch, wall time its loss was complete)
        wait_past(newest_second(folder))  # this file sorts after an earlier attempt's
        self.scalars = RunScalars(folder, batches_per_epoch=1, last_step=last_step, purge_step=purge_step)

    def loss_done(self, worker: int, stage: int, batch: int) -> None:
        """After a LOSS action: queue the batch once its last micro-batch's loss is in."""
        if worker != 0 or stage != self.stage:
            return
        self.remaining[batch] -= 1
        if self.remaining[batch] == 0:
            self.pending.append((batch, time.perf_counter()))
            if len(self.pending) >= self.every:
                self.write()

    def write(self) -> None:
        """Read the queued batches' losses (one host read) and write and flush their scalars."""
        for t, now in self.pending:
            v = self.losses[(0, self.stage, t)]
            rec: dict[str, Any] = {"step": t, "wall_time_s": now}
            if self.workers == 1:
                rec["loss"] = v
            else:
                self.scalars.writer.add_scalar("train/loss_worker0", v, t)
            self.scalars.record(rec)
        self.pending = []
        self.scalars.flush()

    def close(self) -> None:
        self.write()
        self.scalars.close()


def live_loss(job: Job, sched: Schedule, rank: int, actions: Sequence[Action], losses: Mapping[Hashable, float],
              start_index: int = 0) -> LiveLoss | None:
    """The writer when the job asks for TensorBoard and ``rank`` holds worker 0's loss stage
    (else None). ``actions``: the rank's action list, run from ``start_index`` (a resumed
    run's batches finished before it are not written again: TensorBoard's purge hides an
    earlier attempt's events from the first batch still to finish)."""
    folder = job.get("tensorboard")
    stage = sched.stages - 1
    if not folder or (0, stage) not in set(sched.stages_on(rank)):
        return None
    remaining: Counter[int] = Counter(a.batch for a in actions[start_index:]
                                      if a.kind is Kind.LOSS and a.worker == 0 and a.stage == stage)
    last = max((a.batch for a in actions if a.kind is Kind.LOSS), default=0)
    purge = min(remaining) if start_index > 0 and remaining else None
    return LiveLoss(Path(folder), losses, stage=stage, workers=sched.workers, remaining=remaining,
                    every=int(job.get("tensorboard_every") or 1), last_step=last, purge_step=purge)
