"""The replay engine: the dry-run order executed action by action on one device.

:class:`ReplayEngine` is what the single emulation
(:class:`~stalesim.emulator.replay.Emulator`) and the batched one
(:class:`~stalesim.emulator.batched.BatchedEmulator`) share: the action methods (looked
up by name through :func:`stalesim.schedule.dispatch.dispatch_table`, as the executor's
``Rank`` does), the replay loop with its epoch ends and checkpoints, and the public
interface the checkpoint code (:mod:`stalesim.emulator.checkpoint`) reads. Each
subclass builds the runtimes, the batch feed (:mod:`stalesim.emulator.feed`) and the
tally (:mod:`stalesim.emulator.tally`), and owns ``run``, ``finish`` and
``evaluate_metrics``, whose results differ in type (one summary, or one per run) and
so are not overrides of each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from stalesim.emulator.feed import BatchFeed
from stalesim.emulator.plan import ReplayPlan
from stalesim.emulator.results import inflight_bytes, versions_log
from stalesim.emulator.state import Handoff, RunState
from stalesim.emulator.tally import TallyBase
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import BatchStream
from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Action, Kind, Schedule, dry_run
from stalesim.schedule.dispatch import dispatch_table

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.progress import Progress

CKPT_NAME = "checkpoint.pt"

#: Batches between two reads of the losses and correct counts on a GPU (one host
#: synchronisation each; on the CPU a read costs nothing and happens every batch).
READ_EVERY_CUDA = 50

#: The emulator's all-reduce of one (stage, batch): every worker's gradient buffers -> their mean.
MeanFn = Callable[[list[list[torch.Tensor]], str], None]


def read_every_default(device: torch.device) -> int:
    """Batches between reads of the training numbers: 1 on the CPU, :data:`READ_EVERY_CUDA`
    on a GPU (a read waits for the device to finish everything queued)."""
    return 1 if device.type == "cpu" else READ_EVERY_CUDA


def progress_bar(progress: bool | None, total: int, desc: str, initial: int) -> Progress | None:
    """A bar on a terminal, else a line every ~10 s (see stalesim.progress); None with progress=False."""
    if progress is False:
        return None
    from stalesim.progress import Progress

    return Progress(total, desc, "batch", initial=initial, enabled=progress)


class ReplayEngine:
    """The replay shared by both emulations (see the module doc). A subclass sets the
    attributes below, calls :meth:`_init_replay`, then sets ``state``, ``feed`` and ``tally``."""

    #: runs trained at once (a batched emulation: K); bounds what a checkpoint may hold
    runs = 1
    cfg: TrainConfig
    out: Path | None
    checkpoint_every: int
    progress: bool | None
    device: torch.device
    task: str
    stream: BatchStream
    bpe: int
    total: int
    sched: Schedule
    S: int
    P: int
    M: int
    ppv: list[int]
    # keyed (worker, stage) as the executor's Rank keys its runtimes; worker-major order
    # (the order checkpoints store them in)
    rts: dict[tuple[int, int], StageRuntime]
    stage_mods: list[list[torch.nn.Module]]
    state: RunState[Any, Any]
    feed: BatchFeed
    tally: TallyBase
    #: the all-reduce (a batched emulation averages each run's gradients separately)
    _mean: MeanFn
    #: Pause at the first checkpoint after this many batches are done (None: run to the end).
    #: A run of length L paused at H is, up to H, the run of length H (the IR's version table
    #: of a batch depends only on the batches before it) and, resumed from that checkpoint
    #: with a later pause, the same replay as one run of length L; so a plan continues a
    #: candidate from H to 2H instead of rerunning it (stalesim.plan.continuation).
    stop_after: int | None = None

    def _init_replay(self, read_every: int | None = None) -> None:
        """The replay order, the events and the hand-off state (after the runtimes exist)."""
        self.read_every = max(1, int(read_every)) if read_every is not None else read_every_default(self.device)
        self.steps = [st.action for st in dry_run(self.sched)]
        self.plan = ReplayPlan(self.steps, self.sched, bpe=self.bpe, total=self.total,
                               epochs=self.cfg.epochs is not None, checkpoints=self.out is not None,
                               checkpoint_every=self.checkpoint_every)
        # weight versions kept for the checkpoint after each replay step
        self.plan.reserve(self.rts)
        self.replay_s: float | None = None  # seconds of this process's replay (the summary's wall_s)
        self._t0 = time.perf_counter()
        self.handoff = Handoff()  # activations and gradients between stages, labels left
        #: LOSS actions of the last stage per batch (the batch is complete after the last)
        self.losses_per_batch = self.P * self.M
        #: LOSS actions that read one batch's labels (every stage's with a local loss)
        self.label_readers = self.losses_per_batch * (self.S if self.sched.local_loss else 1)
        self.peak_inflight_bytes = 0
        # one method per action kind, named as in the executor's Rank (stalesim.schedule.dispatch)
        self._handlers = dispatch_table(self)

    # ------------------------------------------------- the checkpoint's interface
    def checkpoint_config(self) -> dict[str, Any]:
        """What a checkpoint must have been made with to resume this emulation."""
        return self.cfg.to_dict()

    def loss_labels(self, t: int, worker: int, micro: int | None) -> torch.Tensor:
        """The labels LOSS(worker, t, micro) reads, on the device, read anew from the stream
        (a resume recomputes the in-flight losses with them)."""
        return self.feed.labels(t, worker, micro)

    def release_reserved(self, index: int) -> None:
        """Release the versions reserved for the checkpoint after replay step ``index`` (once
        it is written, or once a resume from it has rebuilt the in-flight graphs)."""
        self.plan.release(index, self.rts)

    def now(self) -> float:
        """Seconds of this run so far (across resumes)."""
        return self.state.elapsed + (time.perf_counter() - self._t0)

    @property
    def horizon(self) -> int:
        """Batches this replay reports: the run's length, or its pause (:attr:`stop_after`)."""
        return self.total if self.stop_after is None else min(self.total, self.stop_after)

    @property
    def paused(self) -> bool:
        """Whether the replay stopped at :attr:`stop_after` before the run's end."""
        return self.horizon < self.total and self.state.index < len(self.steps)

    def check_stop(self) -> None:
        """The replay pauses at the first checkpoint (every ``checkpoint_every`` batches, epoch
        ends; a run folder needed) at or after :attr:`stop_after`, and reports its first
        ``stop_after`` batches: refuse a pause with no checkpoint after it, before anything runs."""
        n = self.stop_after
        if n is None or n >= self.total:
            return
        if n < 1 or not any(ev["checkpoint"] and ev["done"] >= n for ev in self.plan.events.values()):
            raise StalesimError(f"stop_after: no checkpoint at or after batch {n} of this run "
                                f"(checkpoint_every {self.checkpoint_every}; a run folder is needed)")

    # ------------------------------------------------------------- actions
    def _step(self, a: Action) -> None:
        """Dispatch one action to its kind's method (the executor's Rank does the same)."""
        self._handlers[a.kind](a)

    def _exec_forward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        if s == 0:
            x = self.feed.inputs(t, r, m)
        else:
            x = self.handoff.acts.pop((r, s, t, m))
            if not self.sched.local_loss:
                x.requires_grad_(True)
        y = self.rts[(r, s)].forward(a, x)
        if s < self.S - 1:
            self.handoff.acts[(r, s + 1, t, m)] = y.detach()

    def _exec_loss(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        y = self.feed.targets(t, r, m)
        rt = self.rts[(r, s)]
        value = rt.loss(a, y)
        if s == self.S - 1:
            self.tally.record(t, rt.inflight[(t, m)].y, y, value)
        self.feed.consumed(t)

    def _exec_backward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None
        if not (self.sched.local_loss or s == self.S - 1):
            gy = self.handoff.grads.pop((r, s, t, m))
        gx = self.rts[(r, s)].backward(a, gy)
        if s > 0 and not self.sched.local_loss:
            assert gx is not None, "a stage > 0 without a local loss has an input gradient"
            self.handoff.grads[(r, s - 1, t, m)] = gx

    def _exec_backward_input(self, a: Action) -> None:
        """I: the input gradient only (split backward); hands it to the previous stage."""
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None if s == self.S - 1 else self.handoff.grads.pop((r, s, t, m))
        gx = self.rts[(r, s)].backward_input(a, gy)
        if s > 0:
            assert gx is not None, "I of a stage > 0 gives its input gradient"
            self.handoff.grads[(r, s - 1, t, m)] = gx

    def _exec_backward_weight(self, a: Action) -> None:
        """W: the deferred weight gradient of a backward whose I ran."""
        self.rts[(a.worker, a.stage)].backward_weight(a)

    def _exec_nothing(self, a: Action) -> None:
        """Sends, receives and all-reduce waits move nothing in one process (the hand-off
        dictionaries are the messages; the all-reduce completes at the last worker's AR)."""

    _exec_send_activation = _exec_recv_activation = _exec_nothing
    _exec_send_grad = _exec_recv_grad = _exec_allreduce_wait = _exec_nothing

    def _exec_update(self, a: Action) -> None:
        self.rts[(a.worker, a.stage)].update(a)

    def _exec_allreduce_start(self, a: Action) -> None:
        key = (a.stage, a.batch)
        n = self.state.ar_issued.get(key, 0) + 1
        if n < self.P:
            self.state.ar_issued[key] = n
            return
        self.state.ar_issued.pop(key, None)
        self._mean([self.rts[(r, a.stage)].grads(a.batch) for r in range(self.P)], self.cfg.compression)

    # ---------------------------------------------------------------- replay
    def _read_out(self) -> None:
        """Read the queued training numbers now (:meth:`stalesim.emulator.tally.TallyBase.read_out`)."""
        self.tally.read_out()

    def replay(self, bar: bool = False) -> float:
        """The training replay from the state's position to the end (or the divergence);
        returns seconds. ``bar``: show progress (as ``progress`` says: a bar on a terminal,
        else a line every ~10 s). Alone (no run folder open, no evaluation but at epoch
        ends): for benchmarks; ``run`` wraps it."""
        from stalesim.emulator import checkpoint as ckpt

        self._t0 = time.perf_counter()
        st = self.state
        progress = progress_bar(self.progress, self.total, f"{self.cfg.schedule} S={self.S}",
                                len(st.losses)) if bar else None
        steps, events = self.steps, self.plan.events
        i = st.index
        n = len(steps)
        if self.stop_after is not None and i > 0 and events.get(i - 1, {}).get("done", 0) >= self.stop_after:
            return 0.0  # resumed at (or past) its pause: nothing to replay
        try:
            while i < n:
                a = steps[i]
                self._step(a)
                i += 1
                ev = events.get(i - 1)
                if ev is not None and (ev["epoch_end"] or ev["checkpoint"]):
                    self._read_out()  # the epoch's numbers and the checkpointed state are read
                if st.diverged_at is not None:
                    st.index = i
                    return time.perf_counter() - self._t0
                if ev is not None:
                    if progress is not None:
                        progress.goto(ev["done"])
                    for e in ev["epoch_end"]:
                        self.tally.end_epoch(e)
                    if ev["checkpoint"]:
                        st.index = i
                        assert self.out is not None, "checkpoints are planned only with a run folder"
                        ckpt.save(self, self.out / CKPT_NAME)
                        self.release_reserved(i - 1)
                        self._track_memory()
                        if self.stop_after is not None and ev["done"] >= self.stop_after:
                            return time.perf_counter() - self._t0  # paused: resumable from here
                if a.kind is Kind.F:
                    self._track_memory()
            self._read_out()
            st.index = i
            return time.perf_counter() - self._t0
        finally:
            if progress is not None:
                progress.close()

    def _track_memory(self) -> None:
        self.peak_inflight_bytes = max(self.peak_inflight_bytes, inflight_bytes(self.rts.values()))

    def versions_log(self) -> list[dict[str, Any]]:
        """Every action's weight version (:func:`stalesim.emulator.results.versions_log`)."""
        return versions_log(self.rts)
