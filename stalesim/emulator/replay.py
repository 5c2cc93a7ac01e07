"""The delay-buffer emulator: replays a schedule's global order on one device.

Every (worker, stage) gets a :class:`~stalesim.runtime.stage.StageRuntime`; the
actions of ``dry_run(sched)`` are executed in order. SEND/RECV are in-process
hand-offs keyed by (worker, stage, batch, micro) (the activation is detached
and re-marked ``requires_grad`` at the receiver, as the executor does), AR
averages the workers' gradient buffers (through the Pipe-SGD compressor), and
the per-stage queues of in-flight forwards inside the runtimes are the delay
buffers. Nothing is recomputed and no weights are copied except the versions
the schedule needs (see :mod:`stalesim.runtime.stage`).

The schedule is built once for the whole run (about 1 ms per batch to build and
dry-run), so the pipeline never drains between epochs, exactly as a real
pipeline would run, and a resumed run replays the same order.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from stalesim.atomic import AppendLog, ensure_dir, write_json_atomic, write_lines_atomic
from stalesim.emulator.plan import Reservation, checkpoint_reservations, plan_events
from stalesim.emulator.state import Handoff, RunState
from stalesim.errors import StalesimError
from stalesim.runtime.allreduce import mean_in_process
from stalesim.runtime.build import build_stage_modules, replicate, stage_runtimes
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import BatchStream, batch_stream, shard
from stalesim.runtime.devio import read_values, to_device
from stalesim.runtime.stage import StageRuntime
from stalesim.runtime.tasks import correct_count, task_of
from stalesim.runtime.tasks import evaluate as task_evaluate
from stalesim.schedule import Action, Kind, Schedule, dry_run
from stalesim.schedule.dispatch import dispatch_table
from stalesim.summary import RunSummary, config_fields, schedule_fields, version_facts

CKPT_NAME = "checkpoint.pt"

#: Batches between two reads of the losses and correct counts on a GPU (one host
#: synchronisation each; on the CPU a read costs nothing and happens every batch).
READ_EVERY_CUDA = 50


def read_every_default(device: torch.device) -> int:
    """Batches between reads of the training numbers: 1 on the CPU, :data:`READ_EVERY_CUDA`
    on a GPU (a read waits for the device to finish everything queued)."""
    return 1 if device.type == "cpu" else READ_EVERY_CUDA


class Emulator:
    """Build once, then :meth:`run`. ``out`` (a run folder) enables logs and checkpoints."""

    def __init__(self, cfg: TrainConfig, *, out: str | os.PathLike[str] | None = None,
                 checkpoint_every: int = 0, progress: bool | None = None,
                 stream: BatchStream | None = None, model: torch.nn.Module | None = None,
                 read_every: int | None = None) -> None:
        """``model``: a LayeredModel to use instead of ``build_model(cfg.model)`` (tests,
        bring-your-own models); ``stream``: a prepared batch stream (saves reloading data);
        ``read_every``: batches between host reads of the losses (see :meth:`_read_out`;
        default :func:`read_every_default`)."""
        from stalesim.runtime.build import run_model

        self.cfg = cfg.check()
        self.out = Path(out) if out is not None else None
        self.checkpoint_every = int(checkpoint_every)
        self.progress = progress
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise StalesimError(f"device: {cfg.device} requested but no CUDA device is visible")
        base = model if model is not None else run_model(cfg)
        self.input_shape = base.input_shape
        self.task = task_of(cfg)
        self.stream = stream if stream is not None else batch_stream(cfg, input_shape=base.input_shape)
        self.bpe = self.stream.batches_per_epoch
        self.total = cfg.total_iterations(self.bpe)
        self.sched: Schedule = cfg.build_schedule(self.total, self.bpe)
        self.S, self.P = self.sched.stages, self.sched.workers
        self.M = self.sched.microbatches if self.sched.uses_micro else 1
        first = build_stage_modules(cfg, self.sched, model=base, device=self.device)
        self.ppv = first.ppv
        replicas = [first] + [replicate(first, cfg, self.sched) for _ in range(self.P - 1)]
        self.models = [r.model for r in replicas]
        self.stage_mods: list[list[torch.nn.Module]] = [r.stages for r in replicas]
        # keyed (worker, stage) as the executor's Rank keys its runtimes; worker-major order
        # (the order checkpoints store them in)
        self.rts: dict[tuple[int, int], StageRuntime] = {}
        for w, mods in enumerate(replicas):
            rts = stage_runtimes(cfg, self.sched, mods, worker=w, stages=range(self.S),
                                 device=self.device, total=self.total)
            self.rts.update({(w, s): rts[s] for s in range(self.S)})
        self._init_replay(read_every)

    def _init_replay(self, read_every: int | None = None) -> None:
        """The replay order, the events and the hand-off state (after the runtimes exist)."""
        self.read_every = max(1, int(read_every)) if read_every is not None else read_every_default(self.device)
        # device values queued for the next read (:meth:`_read_out`): LOSS values by batch,
        # correct counts by epoch, completed batches with the time they completed
        self._queued_losses: list[tuple[int, torch.Tensor]] = []
        self._queued_correct: list[tuple[int, torch.Tensor]] = []
        self._completed: list[tuple[int, float]] = []
        self.steps = [st.action for st in dry_run(self.sched)]
        self.state = RunState()
        # weight versions kept for the checkpoint after each replay step (see _plan_events)
        self.reserved: dict[int, list[Reservation]] = {}
        self._events = self._plan_events()
        self._replay_s: float | None = None  # seconds of this process's replay (the summary's wall_s)
        self.handoff = Handoff()  # activations and gradients between stages, labels left
        self._batch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.loss_actions_per_batch = self.P * self.M
        self.peak_inflight_bytes = 0
        # one method per action kind, named as in the executor's Rank (stalesim.schedule.dispatch)
        self._handlers = dispatch_table(self)

    # ------------------------------------------------------------ planning
    def _plan_events(self) -> dict[int, dict[str, Any]]:
        """The epoch ends and checkpoints of the replay (:mod:`stalesim.emulator.plan`); the
        weight versions in flight at each checkpoint are reserved until it is written."""
        events = plan_events(self.steps, units=self.S * self.P, bpe=self.bpe, total=self.total,
                             epochs=self.cfg.epochs is not None, checkpoints=self.out is not None,
                             checkpoint_every=self.checkpoint_every)
        if self.out is not None:
            self.reserved = checkpoint_reservations(self.steps, events, self.sched)
            for items in self.reserved.values():
                for w, s, v in items:
                    self.rts[(w, s)].reserve(v)
        return events

    def release_reserved(self, index: int) -> None:
        """Release the versions reserved for the checkpoint after replay step ``index`` (once
        it is written, or once a resume from it has rebuilt the in-flight graphs)."""
        for w, s, v in self.reserved.get(index, ()):
            self.rts[(w, s)].release(v)

    # ------------------------------------------------------------- actions
    def _data(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self._batch.get(t)
        if b is None:
            x, y = self._fetch(t)
            b = (to_device(x, self.device), to_device(y, self.device))
            self._batch[t] = b
            self.handoff.batch_left.setdefault(
                t, self.loss_actions_per_batch * (self.S if self.sched.local_loss else 1))
        return b

    def _fetch(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Global batch t from the stream (a batched emulation stacks its runs' batches)."""
        return self.stream(t)

    def loss_labels(self, t: int, worker: int, micro: int | None) -> torch.Tensor:
        """The labels LOSS(worker, t, micro) reads, on the device, read anew from the stream
        (a resume recomputes the in-flight losses with them)."""
        return self._slice(to_device(self._fetch(t)[1], self.device), worker, micro)

    def checkpoint_config(self) -> dict[str, Any]:
        """What a checkpoint must have been made with to resume this emulation."""
        return self.cfg.to_dict()

    def _slice(self, z: torch.Tensor, worker: int, micro: int | None) -> torch.Tensor:
        if self.P > 1:
            z = shard(z, self.P, worker)
        if micro is not None and self.M > 1:
            z = shard(z, self.M, micro)
        return z

    def _exec_forward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        if s == 0:
            x = self._slice(self._data(t)[0], r, m)
        else:
            x = self.handoff.acts.pop((r, s, t, m))
            if not self.sched.local_loss:
                x.requires_grad_(True)
        y = self.rts[(r, s)].forward(a, x)
        if s < self.S - 1:
            self.handoff.acts[(r, s + 1, t, m)] = y.detach()

    def _exec_loss(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        y = self._slice(self._data(t)[1], r, m)
        rt = self.rts[(r, s)]
        value = rt.loss(a, y)
        if s == self.S - 1:
            st = self.state
            ep = t // self.bpe
            with torch.no_grad():  # per class, or per next character
                self._queued_correct.append((ep, correct_count(rt.inflight[(t, m)].y, y)))
            st.seen[ep] = st.seen.get(ep, 0) + int(y.numel())
            self._queue_loss(t, value)
        self.handoff.batch_left[t] -= 1
        if self.handoff.batch_left[t] == 0:
            del self.handoff.batch_left[t], self._batch[t]

    # -------------------------------------------------- reading the numbers
    def _queue_loss(self, t: int, value: torch.Tensor) -> None:
        """Queue one LOSS value of batch t (unread); a batch is complete after its last LOSS,
        and every ``read_every`` complete batches the queue is read."""
        st = self.state
        self._queued_losses.append((t, value))
        st.loss_count[t] = st.loss_count.get(t, 0) + 1
        if st.loss_count[t] == self.loss_actions_per_batch:
            del st.loss_count[t]
            self._completed.append((t, round(self.now(), 4)))
            if len(self._completed) >= self.read_every:
                self._read_out()

    def _read_out(self) -> None:
        """Read every queued value in one go and log the completed batches in order.

        The Python float arithmetic is the per-LOSS one (``parts[t] += value / P`` in LOSS
        order), so the losses do not depend on when they are read. A non-finite loss sets
        ``diverged_at``; the batches completed after it are not logged (with
        ``read_every`` > 1 the replay ran up to that many batches past the divergence)."""
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

    def _add_loss(self, t: int, value: list[Any]) -> None:
        st = self.state
        st.loss_parts[t] = st.loss_parts.get(t, 0.0) + value[0] / self.P

    def _add_correct(self, ep: int, count: list[Any]) -> None:
        st = self.state
        st.correct[ep] = st.correct.get(ep, 0) + count[0]

    def _complete_batch(self, t: int, now: float) -> None:
        st = self.state
        loss = st.loss_parts.pop(t)
        st.losses[t] = loss
        self._log_step(t, loss, now)
        if not math.isfinite(loss) and st.diverged_at is None:
            st.diverged_at = t

    def _exec_backward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None
        if not (self.sched.local_loss or s == self.S - 1):
            gy = self.handoff.grads.pop((r, s, t, m))
        gx = self.rts[(r, s)].backward(a, gy)
        if s > 0 and not self.sched.local_loss:
            self.handoff.grads[(r, s - 1, t, m)] = gx

    def _exec_backward_input(self, a: Action) -> None:
        """I: the input gradient only (split backward); hands it to the previous stage."""
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None if s == self.S - 1 else self.handoff.grads.pop((r, s, t, m))
        gx = self.rts[(r, s)].backward_input(a, gy)
        if s > 0:
            self.handoff.grads[(r, s - 1, t, m)] = gx

    def _exec_backward_weight(self, a: Action) -> None:
        """W: the deferred weight gradient of a backward whose I ran."""
        self.rts[(a.worker, a.stage)].backward_weight(a)

    def _step(self, a: Action) -> None:
        """Dispatch one action to its kind's method (the executor's Rank does the same)."""
        self._handlers[a.kind](a)

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
        mean_in_process([self.rts[(r, a.stage)].grads(a.batch) for r in range(self.P)],
                        self.cfg.compression)

    # ------------------------------------------------------------- logging
    def _log_step(self, t: int, loss: float, now: float) -> None:
        """Log batch t's loss; ``now``: the wall time when its last LOSS ran."""
        rec = {"step": t, "epoch": t // self.bpe, "loss": loss if math.isfinite(loss) else None,
               "lr": self.cfg.lr_at(t, self.total), "wall_time_s": now}
        self.state.metrics.append(rec)
        if self._metrics_fh is not None:
            self._metrics_fh.write_line(json.dumps(rec))

    def now(self) -> float:
        """Seconds of this run so far (across resumes)."""
        return self.state.elapsed + (time.perf_counter() - self._t0)

    def evaluate(self, worker: int = 0) -> float | None:
        """The evaluation metric with the current weights of ``worker`` (eval mode): test
        accuracy (classifiers) or validation loss in nats per character (LM)."""
        res = self.evaluate_metrics(worker)
        return res.get("val_loss") if self.task == "lm" else res.get("test_accuracy")

    @torch.no_grad()
    def evaluate_metrics(self, worker: int = 0) -> dict[str, float | None]:
        """``{"test_accuracy"}`` or ``{"val_loss", "val_bpc"}`` (:func:`stalesim.runtime.tasks.evaluate`)."""
        if self.task != "lm" and self.stream.data.test_x is None:
            return {"test_accuracy": None}
        with self._eval_model(worker) as forward:
            return task_evaluate(forward, self.stream.test_batches(self._eval_batch_size()),
                                 self.device, self.task)

    def _eval_batch_size(self) -> int:
        return 64 if self.task == "lm" else 1000

    @contextmanager
    def _eval_model(self, worker: int) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
        """Worker ``worker``'s stages as one forward in eval mode (train mode again after)."""
        mods = self.stage_mods[worker]
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

    def _end_epoch(self, epoch: int) -> None:
        st = self.state
        metrics = self.evaluate_metrics()
        train_acc = st.correct.pop(epoch, 0) / max(st.seen.pop(epoch, 1), 1)
        rec = {"epoch": epoch, "train_accuracy": train_acc, **metrics,
               "wall_time_s": round(self.now(), 4)}
        st.epochs.append(rec)
        st.metrics.append(rec)
        if self._metrics_fh is not None:
            self._metrics_fh.write_line(json.dumps(rec))

    # ---------------------------------------------------------------- run
    def run(self, resume: bool = False) -> dict[str, Any]:
        from stalesim.emulator import checkpoint as ckpt

        self._metrics_fh = None
        if self.out is not None:
            ensure_dir(self.out)
            if resume:
                ckpt.load(self, self.out / CKPT_NAME)
            else:
                write_json_atomic(self.out / "config.json", {"train": self.cfg.to_dict(),
                                                             "checkpoint_every": self.checkpoint_every})
            # a live log (see stalesim.atomic.AppendLog), rewritten up to the checkpoint on resume
            self._metrics_fh = AppendLog(self.out / "metrics.jsonl",
                                         (json.dumps(rec) for rec in self.state.metrics))
        elif resume:
            raise StalesimError("resume: needs --out RUN_DIR (the run folder holding the checkpoint)")
        self._t0 = time.perf_counter()
        bar = self._bar()
        try:
            self._replay(bar)
            self._replay_s = round(time.perf_counter() - self._t0, 4)
        finally:
            if bar is not None:
                bar.close()
            if self._metrics_fh is not None:
                self._metrics_fh.close()
        return self.finish()

    def replay(self) -> float:
        """Just the training replay (no run folder, no evaluation); returns seconds.
        For benchmarks."""
        self._metrics_fh = None
        self._t0 = time.perf_counter()
        self._replay(None)
        return time.perf_counter() - self._t0

    def _bar(self):
        """A bar on a terminal, else a line every ~10 s (see stalesim.progress); None with progress=False."""
        if self.progress is False:
            return None
        from stalesim.progress import Progress

        return Progress(self.total, f"{self.cfg.schedule} S={self.S}", "batch", initial=len(self.state.losses),
                        enabled=self.progress)

    def _replay(self, bar) -> None:
        st = self.state
        steps, events = self.steps, self._events
        i = st.index
        n = len(steps)
        while i < n:
            a = steps[i]
            self._step(a)
            i += 1
            ev = events.get(i - 1)
            if ev is not None and (ev["epoch_end"] or ev["checkpoint"]):
                self._read_out()  # the epoch's numbers and the checkpointed state are read
            if st.diverged_at is not None:
                st.index = i
                return
            if ev is not None:
                if bar is not None:
                    bar.goto(ev["done"])
                for e in ev["epoch_end"]:
                    self._end_epoch(e)
                if ev["checkpoint"]:
                    st.index = i
                    from stalesim.emulator import checkpoint as ckpt

                    ckpt.save(self, self.out / CKPT_NAME)
                    self.release_reserved(i - 1)
                    self._track_memory()
            if a.kind is Kind.F:
                self._track_memory()
        self._read_out()
        st.index = i

    def _track_memory(self) -> None:
        b = sum(r.stash_bytes() for r in self.rts.values())
        b += sum(rec.x.numel() * rec.x.element_size() for r in self.rts.values()
                 for rec in [*r.inflight.values(), *r.deferred.values()])
        self.peak_inflight_bytes = max(self.peak_inflight_bytes, b)

    # ------------------------------------------------------------ results
    def versions_log(self) -> list[dict[str, Any]]:
        out = []
        for (r, s), rt in self.rts.items():
            for text, v in rt.versions_used:
                out.append({"worker": r, "stage": s, "action": text, "version": v})
        return out

    def version_facts(self) -> dict[str, Any]:
        """The summary's version fields (:func:`stalesim.summary.version_facts`): the IR's and
        the measured staleness, and whether every action used the IR's version."""
        return version_facts(self.sched, (u for rt in self.rts.values() for u in rt.versions_used))

    def _final_epochs(self, cfg: TrainConfig, epochs: list[dict[str, Any]], diverged: bool,
                      metrics: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
        """The epoch records plus a final evaluation (``{"epoch": None, ...}``) when the run
        did not end on an epoch's own (diverged runs are not evaluated)."""
        key = "val_loss" if self.task == "lm" else "test_accuracy"
        epochs = list(epochs)
        if not diverged and (not epochs or cfg.epochs is None):
            m = metrics()
            if m.get(key) is not None and (not epochs or epochs[-1].get(key) is None):
                epochs.append({"epoch": None, **m})
        return epochs

    def _summary(self, cfg: TrainConfig, *, losses: list[float], diverged_at: int | None,
                 epochs: list[dict[str, Any]], data_note: str | None, facts: dict[str, Any],
                 stash_peak_bytes: int, inflight_peak_bytes: int, wall_time_s: float,
                 batched: int | None = None) -> RunSummary:
        """One run's :class:`~stalesim.summary.RunSummary` (also each run of a batch)."""
        final = epochs[-1] if epochs and diverged_at is None else {}
        return RunSummary(
            producer="emulate", **schedule_fields(self.sched), **config_fields(cfg), **facts,
            task=self.task, data_note=data_note, device_kind=self.device.type, ppv=self.ppv,
            iterations=self.total, batches_per_epoch=self.bpe, batched=batched,
            run_dir=None if self.out is None else str(self.out),
            steps_done=len(losses), losses=[x if math.isfinite(x) else None for x in losses],
            final_loss=losses[-1] if losses and math.isfinite(losses[-1]) else None,
            diverged=diverged_at is not None, diverged_at=diverged_at,
            final_test_accuracy=final.get("test_accuracy"), final_val_loss=final.get("val_loss"),
            final_val_bpc=final.get("val_bpc"), epoch_metrics=epochs,
            wall_s=self._replay_s, wall_time_s=wall_time_s,
            stash_peak_bytes=stash_peak_bytes, inflight_peak_bytes=inflight_peak_bytes)

    def finish(self) -> dict[str, Any]:
        st = self.state
        losses = [st.losses[t] for t in sorted(st.losses)]
        epochs = self._final_epochs(self.cfg, st.epochs, st.diverged_at is not None, self.evaluate_metrics)
        facts = self.version_facts()
        summary = self._summary(
            self.cfg, losses=losses, diverged_at=st.diverged_at, epochs=epochs,
            data_note=self.stream.data.note, facts=facts,
            stash_peak_bytes=sum(r.stash_peak_bytes for r in self.rts.values()),
            inflight_peak_bytes=self.peak_inflight_bytes, wall_time_s=round(self.now(), 4)).to_dict()
        if self.out is not None:
            write_lines_atomic(self.out / "versions.jsonl", (json.dumps(rec) for rec in self.versions_log()))
            write_json_atomic(self.out / "summary.json", summary)
        return summary


def emulate(cfg: TrainConfig, **kw: Any) -> dict[str, Any]:
    """Build and run an emulation; returns the summary dict."""
    resume = kw.pop("resume", False)
    check_request(cfg, out=kw.get("out"), resume=resume, own_model=kw.get("model") is not None)
    return Emulator(cfg, **kw).run(resume=resume)


def check_request(cfg: TrainConfig, *, out: str | os.PathLike[str] | None = None, resume: bool = False,
                  own_model: bool = False) -> None:
    """Everything about a run that can be checked in milliseconds, before the model is built
    and the data loaded: the config (model shape, batch, the run's schedule), a zoo model
    name, the data folder, the run folder (writable, not a file) and the checkpoint to
    resume from. A mistake here costs nothing; found after loading it costs minutes."""
    from stalesim.runtime.build import check_own_code

    cfg.check_runnable(own_model=own_model)
    check_own_code(cfg, model=not own_model)  # the user's pkg.module:factory code, if any
    if resume and out is None:
        raise StalesimError("resume: needs --out RUN_DIR (the run folder holding the checkpoint)")
    if out is not None:
        from stalesim.atomic import check_writable_dir

        check_writable_dir(out)
        if resume and not (Path(out) / CKPT_NAME).is_file():
            raise StalesimError(f"resume: no checkpoint in {out} (expected {Path(out) / CKPT_NAME})")
