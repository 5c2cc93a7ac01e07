"""Strict transport: NCCL's ordering rules enforced on gloo, so the CPU runs can break
where a GPU run would hang (switch: ``STALESIM_STRICT_COMM=1``).

gloo matches messages by (peer, tag) and buffers them, so an executor whose
receives are posted in an order NCCL would deadlock on still runs fine on the
CPU. Here every communicator NCCL would have (a process group's rank pair for
point-to-point, the group itself for a collective; see
:mod:`stalesim.schedule.comm_check`) gets one worker thread that runs that
communicator's operations strictly in issue order, each starting only after the
previous one completed, and every point-to-point op is a rendezvous:

* a receive first sends the sender a 1-element *ready token* (its own tag, on
  the same group), then receives the data;
* a send first waits for the receiver's token, then sends the data.

So a send completes only after the matching receive reached the head of the
receiver's queue, as an NCCL kernel pair does. An all-reduce is a blocking
collective on its thread. Every tensor handed to an operation must live on the
rank's compute device (NCCL takes device tensors only).

Why threads are safe with ProcessGroupGloo: each thread drives its own process
group (a gloo context of its own) or its own peer of one, gloo's pairs serialize
their socket I/O internally, and every blocking wait releases the GIL; the
compute thread only enqueues and waits on :class:`StrictWork` futures.
"""

from __future__ import annotations

import datetime
import queue
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

TOKEN_TAG = 1 << 30  # added to a message's tag for its ready token (message tags are < 2**27)
STRICT_ENV = "STALESIM_STRICT_COMM"


def _posted(work: dist.Work | None) -> dist.Work:
    """torch returns None from isend/irecv on a rank outside ``group``; every lane here is
    between two members, so None would be a bug in the caller, not a message to skip."""
    if work is None:
        raise RuntimeError("strict comm: a point-to-point message was posted outside its group")
    return work


class StrictWork:
    """The future of one operation a lane runs; ``wait`` mirrors a c10d Work's."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        secs = None if timeout is None else timeout.total_seconds()
        if not self._done.wait(secs):
            raise RuntimeError(f"timed out after {secs:g} s (strict transport)")
        if self.error is not None:
            raise RuntimeError(str(self.error)) from self.error
        return True


class _Lane:
    """One communicator's FIFO: a daemon thread running its operations one at a time."""

    def __init__(self, name: str) -> None:
        self.q: queue.Queue[tuple[Callable[[], None], StrictWork] | None] = queue.Queue()
        self.broken: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            fn, work = item
            if self.broken is not None:
                work.finish(RuntimeError(f"an earlier operation on this communicator failed ({self.broken})"))
                continue
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting compute thread
                self.broken = exc
                work.finish(exc)
            else:
                work.finish()


class StrictComm:
    """Runs this rank's point-to-point messages and all-reduces under NCCL's rules."""

    def __init__(self, rank: int, device: torch.device, timeout_s: float) -> None:
        self.rank = rank
        self.device = device
        self.td = datetime.timedelta(seconds=timeout_s)
        self.lanes: dict[tuple[int, int], _Lane] = {}

    def _lane(self, group: dist.ProcessGroup | None, peer: int) -> _Lane:
        key = (id(group), peer)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = _Lane(f"strict-comm-{self.rank}-{peer}")
        return lane

    def check_device(self, tensor: torch.Tensor) -> str | None:
        """Why ``tensor`` could not be handed to NCCL (None: it could)."""
        if tensor.device != self.device:
            return (f"a {tuple(tensor.shape)} tensor on {tensor.device}, not on the rank's compute "
                    f"device {self.device} (NCCL sends device tensors only)")
        return None

    def _submit(self, lane: _Lane, fn: Callable[[], None]) -> StrictWork:
        work = StrictWork()
        lane.q.put((fn, work))
        return work

    def send(self, tensor: torch.Tensor, dst: int, tag: int, group: dist.ProcessGroup | None) -> StrictWork:
        td = self.td

        def run() -> None:
            token = torch.zeros(1, dtype=torch.int64)
            _posted(dist.irecv(token, src=dst, tag=tag + TOKEN_TAG, group=group)).wait(timeout=td)
            _posted(dist.isend(tensor, dst=dst, tag=tag, group=group)).wait(timeout=td)

        return self._submit(self._lane(group, dst), run)

    def recv(self, buf: torch.Tensor, src: int, tag: int, group: dist.ProcessGroup | None) -> StrictWork:
        td = self.td

        def run() -> None:
            token = torch.zeros(1, dtype=torch.int64)
            ready = _posted(dist.isend(token, dst=src, tag=tag + TOKEN_TAG, group=group))
            _posted(dist.irecv(buf, src=src, tag=tag, group=group)).wait(timeout=td)
            ready.wait(timeout=td)

        return self._submit(self._lane(group, src), run)

    def all_reduce(self, flat: torch.Tensor, group: dist.ProcessGroup | None) -> StrictWork:
        def run() -> None:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)

        return self._submit(self._lane(group, -1), run)

    def close(self) -> None:
        """Stop the lanes (every operation has completed: the caller flushed)."""
        for lane in self.lanes.values():
            lane.q.put(None)
        for lane in self.lanes.values():
            lane.thread.join(timeout=1.0)
        self.lanes.clear()
