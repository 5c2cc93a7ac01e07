"""The batch feed: what the replay's stage-0 forwards and LOSS actions read.

Its own class because the single and the batched emulation differ only here in how a
batch is fetched (one stream, or the K runs' streams stacked along a run axis) and cut
(worker and micro-batch shards of the batch axis: axis 0, or axis 1 behind the run
axis), while the bookkeeping is the same: a global batch is fetched and moved to the
device once, shared by every action that reads it, and dropped after the last LOSS that
reads its labels (the count lives in the :class:`~stalesim.emulator.state.Handoff`, so a
checkpoint carries it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from stalesim.emulator.state import Handoff
from stalesim.runtime.data import BatchStream, shard
from stalesim.runtime.devio import to_device

#: Global batch t -> (inputs, labels) on the host.
Fetch = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


class BatchFeed:
    """Batches of one run. ``readers``: the LOSS actions that read one batch's labels."""

    def __init__(self, fetch: Fetch, device: torch.device, handoff: Handoff, *, workers: int,
                 micros: int, readers: int) -> None:
        self.fetch = fetch
        self.device = device
        self.handoff = handoff
        self.workers, self.micros, self.readers = workers, micros, readers
        self._batch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _data(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self._batch.get(t)
        if b is None:
            x, y = self.fetch(t)
            b = (to_device(x, self.device), to_device(y, self.device))
            self._batch[t] = b
            self.handoff.batch_left.setdefault(t, self.readers)
        return b

    def inputs(self, t: int, worker: int, micro: int | None) -> torch.Tensor:
        """The inputs the stage-0 forward of (worker, t, micro) reads, on the device."""
        return self.slice(self._data(t)[0], worker, micro)

    def targets(self, t: int, worker: int, micro: int | None) -> torch.Tensor:
        """The labels LOSS(worker, t, micro) reads, on the device (the cached batch)."""
        return self.slice(self._data(t)[1], worker, micro)

    def labels(self, t: int, worker: int, micro: int | None) -> torch.Tensor:
        """The labels LOSS(worker, t, micro) reads, read anew from the stream (a resume
        recomputes the in-flight losses with them)."""
        return self.slice(to_device(self.fetch(t)[1], self.device), worker, micro)

    def consumed(self, t: int) -> None:
        """One LOSS read batch t's labels; the batch is dropped after the last."""
        left = self.handoff.batch_left
        left[t] -= 1
        if left[t] == 0:
            del left[t], self._batch[t]

    def slice(self, z: torch.Tensor, worker: int, micro: int | None) -> torch.Tensor:
        """Worker shard, then micro-batch, along the batch axis (axis 0)."""
        if self.workers > 1:
            z = shard(z, self.workers, worker)
        if micro is not None and self.micros > 1:
            z = shard(z, self.micros, micro)
        return z


class BatchedFeed(BatchFeed):
    """Batches of K runs: run k's batch t from its own stream, stacked along a leading run axis."""

    def __init__(self, streams: Sequence[BatchStream], device: torch.device, handoff: Handoff, *,
                 workers: int, micros: int, readers: int) -> None:
        self.streams = list(streams)
        super().__init__(self._stacked, device, handoff, workers=workers, micros=micros, readers=readers)

    def _stacked(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*(st(t) for st in self.streams))
        return torch.stack(xs), torch.stack(ys)

    def slice(self, z: torch.Tensor, worker: int, micro: int | None) -> torch.Tensor:
        """Worker shard, then micro-batch, along the batch axis (axis 1)."""
        if self.workers > 1:
            n = z.shape[1] // self.workers
            z = z[:, worker * n:(worker + 1) * n]
        if micro is not None and self.micros > 1:
            n = z.shape[1] // self.micros
            z = z[:, micro * n:(micro + 1) * n]
        return z
