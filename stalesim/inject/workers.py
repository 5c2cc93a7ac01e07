"""Data-parallel workers in a user's loop: one model, the workers in turn, the emulator's all-reduce.

In the emulator a data-parallel schedule (``dp``, ``pipe-sgd`` with P > 1 workers) gives each
worker a replica of every stage and its own shard of batch t; the all-reduce of each (stage,
batch) replaces every worker's gradient by the mean over the workers, each compressed first
(:mod:`stalesim.runtime.allreduce`), and every worker then applies the same update. So the
replicas stay equal and version n of a stage is one set of tensors whichever worker reads it:
a loop of one process keeps one model and runs the P workers one after another, as gradient
accumulation runs micro-batches. Worker r's forward(s) and backward(s) run on its own batch,
with its loss not divided by P (each data-parallel rank takes its own mean loss; the all-reduce
averages, as DDP's does).

:class:`WorkerGrads` is that all-reduce on ``.grad``: when worker r + 1's first forward starts,
worker r's gradients are packed (:func:`~stalesim.runtime.allreduce.pack`, the emulator's own
compression and layout) and added to a running sum, and ``.grad`` is cleared for the next
worker; the last worker's backward adds its own and :func:`~stalesim.runtime.allreduce.unpack_mean`
writes the mean into ``.grad`` as each parameter's gradient lands (a post-accumulate-grad hook),
and a callback at the end of that backward (autograd's ``queue_callback``, as DDP's reducer
finalizes its backward) lands the parameters it did not reach. So after the loop's last
``backward()`` ``.grad`` holds the mean, as after DDP's backward, for clipping, a scaler's
unscale and logging alike. The
sum runs in worker order, the emulator's, so the mean is its mean bit for bit. Memory: one
gradient-sized sum beside ``.grad``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.hooks import RemovableHandle

from stalesim.errors import StalesimError
from stalesim.runtime.allreduce import pack, unpack_mean
from stalesim.runtime.config import COMPRESSIONS
from stalesim.schedule import Kind, Schedule, VersionTable


def check_compression(compression: object, workers: int) -> str:
    """The all-reduce's wire format (``COMPRESSIONS``); one that is not ``none`` needs workers."""
    if compression not in COMPRESSIONS:
        raise StalesimError(f"compression: unknown {compression!r} (known: {', '.join(COMPRESSIONS)})")
    if compression != "none" and workers < 2:
        raise StalesimError(f"compression: {compression!r} compresses the gradient all-reduce of data-parallel "
                            f"workers; the schedule has one worker")
    return str(compression)


def check_allreduce(sched: Schedule, steps: int) -> None:
    """With several workers, one model stands for every replica only if every worker's gradient
    of each (stage, batch) is all-reduced before its update (the IR's AR actions)."""
    if sched.workers < 2:
        return
    reduced = {(a.worker, a.stage, a.batch) for a in sched.actions() if a.kind is Kind.AR}
    for r in range(sched.workers):
        for s in range(sched.stages):
            for t in range(steps):
                if (r, s, t) not in reduced:
                    raise StalesimError(f"schedule: worker {r}'s gradient of stage {s}, batch {t} is not "
                                        f"all-reduced; a training loop keeps one model for all workers")


def first_different_worker(table: VersionTable, workers: int) -> int | None:
    """The first worker whose rows are not worker 0's, or None (the registry's schedules:
    every worker reads and makes the same versions)."""
    rows = {(s, t, m): v for (r, s, t, m), v in table.vf.items() if r == 0}
    back = {(s, t, m): v for (r, s, t, m), v in table.vb.items() if r == 0}
    for r in range(1, workers):
        if ({(s, t, m): v for (w, s, t, m), v in table.vf.items() if w == r} != rows
                or {(s, t, m): v for (w, s, t, m), v in table.vb.items() if w == r} != back):
            return r
    return None


class WorkerGrads:
    """The emulator's all-reduce over workers that run one after another on ``.grad``
    (module doc). ``params``: every stage's trainable parameters."""

    def __init__(self, params: Sequence[torch.nn.Parameter], workers: int, compression: str) -> None:
        self.params = list(params)
        self.workers = workers
        self.mode = compression
        self.sums: dict[int, torch.Tensor] = {}  # param index -> packed sum of the finished workers'
        self.reduced: set[int] = set()  # params whose mean is in .grad this step
        self.last = False  # the step's last worker runs: its backward lands the mean
        self._queued = False  # the end-of-backward callback is queued
        self.step = 0
        self.handles: list[RemovableHandle] = [
            p.register_post_accumulate_grad_hook(self._landed(i)) for i, p in enumerate(self.params)]

    def worker_done(self, worker: int, step: int) -> None:
        """Worker ``worker`` of step ``step`` ran its backward(s) (the next worker's first forward
        starts): add its gradients to the sums and clear ``.grad`` for the next worker."""
        if all(p.grad is None for p in self.params):
            raise StalesimError(f"forward: worker {worker} of step {step} ran no backward before worker "
                                f"{worker + 1}'s forward; run each worker's forward and backward in turn")
        with torch.no_grad():
            for i, p in enumerate(self.params):
                g = p.grad
                if g is None:
                    continue  # the emulator's zero buffer adds nothing
                flat = pack([g], self.mode, dtype=g.dtype, device=g.device)
                kept = self.sums.get(i)
                if kept is None:
                    self.sums[i] = flat
                else:
                    kept.add_(flat)
                p.grad = None

    def last_worker(self, step: int) -> None:
        """The step's last worker's last forward runs: its backward lands each mean."""
        self.last, self.step = True, step

    def _landed(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            if not self.last:
                return  # an earlier worker's backward, or a micro-batch before the last: accumulate
            if i in self.reduced:
                raise StalesimError(f"backward: a gradient of step {self.step} arrived after its workers' "
                                    f"all-reduce; run each forward's backward before the next forward")
            self._reduce(i)
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        return hook

    def _end_of_backward(self) -> None:
        self._queued = False
        self.finish()

    def _reduce(self, i: int) -> None:
        p = self.params[i]
        total = self.sums.pop(i, None)
        g = p.grad
        if g is None and total is None:
            return  # no worker's backward reached it: no gradient, as without workers
        with torch.no_grad():
            if g is None:
                g = p.grad = torch.zeros_like(p)  # the emulator's zero buffer of the last worker
            flat = pack([g], self.mode, dtype=g.dtype, device=g.device)
            total = flat if total is None else total.add_(flat)
            unpack_mean(total, [g], self.workers)
        self.reduced.add(i)

    def finish(self) -> None:
        """The mean of every parameter the last worker's backward did not reach (at its end;
        again before the step and per-stage clipping, for a last backward that reached none)."""
        for i in list(self.sums):
            self._reduce(i)

    def next_step(self) -> None:
        """The step landed: the next step's first worker starts from nothing."""
        self.sums.clear()
        self.reduced.clear()
        self.last = self._queued = False

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

