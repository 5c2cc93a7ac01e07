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
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from stalesim.atomic import AppendLog, ensure_dir, write_json_atomic, write_lines_atomic
from stalesim.emulator.state import RunState
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

CKPT_NAME = "checkpoint.pt"

#: Batches between two reads of the losses and correct counts on a GPU (one host
#: synchronisation each; on the CPU a read costs nothing and happens every batch).
READ_EVERY_CUDA = 50


def read_every_default(device: torch.device) -> int:
    """Batches between reads of the training numbers: 1 on the CPU, :data:`READ_EVERY_CUDA`
    on a GPU (a read waits for the device to finish everything queued)."""
    return 1 if device.type == "cpu" else READ_EVERY_CUDA


def _nothing(a: Action) -> None:
    """Sends, receives and all-reduce waits move nothing in one process."""

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
        self.rts: list[list[StageRuntime]] = []
        for w, mods in enumerate(replicas):
            rts = stage_runtimes(cfg, self.sched, mods, worker=w, stages=range(self.S),
                                 device=self.device, total=self.total)
            self.rts.append([rts[s] for s in range(self.S)])
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
        self._ck_release: dict[int, list[tuple[int, int, int]]] = {}
        self._events = self._plan_events()
        self._acts: dict[tuple, torch.Tensor] = {}
        self._grads: dict[tuple, torch.Tensor] = {}
        self._batch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._batch_left: dict[int, int] = {}
        self.loss_actions_per_batch = self.P * self.M
        self.peak_inflight_bytes = 0
        # one method per action kind, as the executor's Rank dispatches; sends and
        # receives are the in-process hand-off dictionaries, the ARW waits for nothing
        # (the all-reduce completes at the last worker's AR)
        self._handlers: dict[Kind, Callable[[Action], None]] = {
            Kind.F: self._forward, Kind.LOSS: self._loss, Kind.B: self._backward,
            Kind.I: self._backward_input, Kind.W: self._backward_weight,
            Kind.U: self._update, Kind.AR: self._allreduce_start,
            Kind.SEND_F: _nothing, Kind.RECV_F: _nothing, Kind.SEND_B: _nothing,
            Kind.RECV_B: _nothing, Kind.ARW: _nothing,
        }

    # ------------------------------------------------------------ planning
    def _plan_events(self) -> dict[int, dict[str, Any]]:
        """Replay positions after which an epoch ends / a checkpoint is due.

        A batch is *done* when all its updates ran; "after step k" means every
        batch < k is done. For every checkpoint, the forwards in flight there are
        found now, so their weight versions can be reserved (kept) until it.
        """
        need = self.S * self.P
        left: dict[int, int] = defaultdict(lambda: need)
        done_upto = 0
        finished: set[int] = set()
        events: dict[int, dict[str, Any]] = {}
        for i, a in enumerate(self.steps):
            if a.kind is not Kind.U:
                continue
            left[a.batch] -= 1
            if left[a.batch] == 0:
                finished.add(a.batch)
                del left[a.batch]
                start = done_upto
                while done_upto in finished:
                    finished.discard(done_upto)
                    done_upto += 1
                for k in range(start + 1, done_upto + 1):
                    ev = events.setdefault(i, {"done": k, "epoch_end": [], "checkpoint": False})
                    ev["done"] = k
                    if k % self.bpe == 0 and self.cfg.epochs is not None:
                        ev["epoch_end"].append(k // self.bpe - 1)
                    if self.out is not None and (
                        (self.checkpoint_every and k % self.checkpoint_every == 0)
                        or (k % self.bpe == 0 and k < self.total)
                    ):
                        ev["checkpoint"] = True
        if self.out is not None:
            self._reserve_for_checkpoints(events)
        return events

    def _reserve_for_checkpoints(self, events: dict[int, dict[str, Any]]) -> None:
        ck = sorted(i for i, ev in events.items() if ev["checkpoint"])
        if not ck:
            return
        f_at: dict[tuple, int] = {}
        spans = []
        for i, a in enumerate(self.steps):
            if a.kind is Kind.F:
                f_at[(a.worker, a.stage, a.batch, a.micro)] = i
            elif a.kind is Kind.B or a.kind is Kind.W:  # the backward completes (W: split)
                key = (a.worker, a.stage, a.batch, a.micro)
                spans.append((f_at.pop(key), i, key))
        import bisect

        self._ck_release = defaultdict(list)
        table = self.sched.versions
        for fi, bi, key in spans:
            j = bisect.bisect_left(ck, fi)
            while j < len(ck) and ck[j] < bi:
                w, s, t, m = key
                v = table.v_f(s, t, m, w)
                self.rts[w][s].reserve(v)
                self._ck_release[ck[j]].append((w, s, v))
                j += 1

    # ------------------------------------------------------------- actions
    def _data(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self._batch.get(t)
        if b is None:
            x, y = self._fetch(t)
            b = (to_device(x, self.device), to_device(y, self.device))
            self._batch[t] = b
            self._batch_left.setdefault(
                t, self.loss_actions_per_batch * (self.S if self.sched.local_loss else 1))
        return b

    def _fetch(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Global batch t from the stream (a batched emulation stacks its runs' batches)."""
        return self.stream(t)

    def _labels(self, t: int) -> torch.Tensor:
        """Batch t's labels on the device (checkpoint resume recomputes losses with them)."""
        return to_device(self._fetch(t)[1], self.device)

    def checkpoint_config(self) -> dict[str, Any]:
        """What a checkpoint must have been made with to resume this emulation."""
        return self.cfg.to_dict()

    def _slice(self, z: torch.Tensor, worker: int, micro: int | None) -> torch.Tensor:
        if self.P > 1:
            z = shard(z, self.P, worker)
        if micro is not None and self.M > 1:
            z = shard(z, self.M, micro)
        return z

    def _forward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        if s == 0:
            x = self._slice(self._data(t)[0], r, m)
        else:
            x = self._acts.pop((r, s, t, m))
            if not self.sched.local_loss:
                x.requires_grad_(True)
        y = self.rts[r][s].forward(a, x)
        if s < self.S - 1:
            self._acts[(r, s + 1, t, m)] = y.detach()

    def _loss(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        y = self._slice(self._data(t)[1], r, m)
        rt = self.rts[r][s]
        value = rt.loss(a, y)
        if s == self.S - 1:
            st = self.state
            ep = t // self.bpe
            with torch.no_grad():  # per class, or per next character
                self._queued_correct.append((ep, correct_count(rt.inflight[(t, m)].y, y)))
            st.seen[ep] = st.seen.get(ep, 0) + int(y.numel())
            self._queue_loss(t, value)
        self._batch_left[t] -= 1
        if self._batch_left[t] == 0:
            del self._batch_left[t], self._batch[t]

    # -------------------------------------------------- reading the numbers
    def _queue_loss(self, t: int, value: torch.Tensor) -> None:
        """Queue one LOSS value of batch t (unread); a batch is complete after its last LOSS,
        and every ``read_every`` complete batches the queue is read."""
        st = self.state
        self._queued_losses.append((t, value))
        st.loss_count[t] = st.loss_count.get(t, 0) + 1
        if st.loss_count[t] == self.loss_actions_per_batch:
            del st.loss_count[t]
            self._completed.append((t, round(self._now(), 4)))
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

    def _backward(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None
        if not (self.sched.local_loss or s == self.S - 1):
            gy = self._grads.pop((r, s, t, m))
        gx = self.rts[r][s].backward(a, gy)
        if s > 0 and not self.sched.local_loss:
            self._grads[(r, s - 1, t, m)] = gx

    def _backward_input(self, a: Action) -> None:
        """I: the input gradient only (split backward); hands it to the previous stage."""
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        gy = None if s == self.S - 1 else self._grads.pop((r, s, t, m))
        gx = self.rts[r][s].backward_input(a, gy)
        if s > 0:
            self._grads[(r, s - 1, t, m)] = gx

    def _backward_weight(self, a: Action) -> None:
        """W: the deferred weight gradient of a backward whose I ran."""
        self.rts[a.worker][a.stage].backward_weight(a)

    def _step(self, a: Action) -> None:
        """Dispatch one action to its kind's method (the executor's Rank does the same)."""
        self._handlers[a.kind](a)

    def _update(self, a: Action) -> None:
        self.rts[a.worker][a.stage].update(a)

    def _allreduce_start(self, a: Action) -> None:
        key = (a.stage, a.batch)
        n = self.state.ar_issued.get(key, 0) + 1
        if n < self.P:
            self.state.ar_issued[key] = n
            return
        self.state.ar_issued.pop(key, None)
        mean_in_process([self.rts[r][a.stage].grads(a.batch) for r in range(self.P)],
                        self.cfg.compression)

    # ------------------------------------------------------------- logging
    def _log_step(self, t: int, loss: float, now: float) -> None:
        """Log batch t's loss; ``now``: the wall time when its last LOSS ran."""
        rec = {"step": t, "epoch": t // self.bpe, "loss": loss if math.isfinite(loss) else None,
               "lr": self.cfg.lr_at(t, self.total), "wall_time_s": now}
        self.state.metrics.append(rec)
        if self._metrics_fh is not None:
            self._metrics_fh.write_line(json.dumps(rec))

    def _now(self) -> float:
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
               "wall_time_s": round(self._now(), 4)}
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
                    for w, s, v in self._ck_release.get(i - 1, []):
                        self.rts[w][s].release(v)
                    self._track_memory()
            if a.kind is Kind.F:
                self._track_memory()
        self._read_out()
        st.index = i

    def _track_memory(self) -> None:
        b = sum(r.stash_bytes() for row in self.rts for r in row)
        b += sum(rec.x.numel() * rec.x.element_size() for row in self.rts for r in row
                 for rec in [*r.inflight.values(), *r.deferred.values()])
        self.peak_inflight_bytes = max(self.peak_inflight_bytes, b)

    # ------------------------------------------------------------ results
    def versions_log(self) -> list[dict[str, Any]]:
        out = []
        for r, row in enumerate(self.rts):
            for s, rt in enumerate(row):
                for text, v in rt.versions_used:
                    out.append({"worker": r, "stage": s, "action": text, "version": v})
        return out

    def versions_match(self) -> bool:
        """Every F/B read the version the IR's table says, every U produced u(s,t)."""
        table = self.sched.versions
        for rec in self.versions_log():
            a = Action.parse(rec["action"])
            if a.kind is Kind.F:
                ok = table.v_f(a.stage, a.batch, a.micro, a.worker) == rec["version"]
            elif a.kind in (Kind.B, Kind.I, Kind.W):  # W reads the version its I read
                ok = table.v_b(a.stage, a.batch, a.micro, a.worker) == rec["version"]
            else:
                ok = table.u(a.stage, a.batch, a.worker) == rec["version"]
            if not ok:
                return False
        return True

    def finish(self) -> dict[str, Any]:
        st = self.state
        diverged = st.diverged_at is not None
        losses = [st.losses[t] for t in sorted(st.losses)]
        epochs = list(st.epochs)
        key = "val_loss" if self.task == "lm" else "test_accuracy"
        if not diverged and (not epochs or self.cfg.epochs is None):
            metrics = self.evaluate_metrics()
            if metrics.get(key) is not None and (not epochs or epochs[-1].get(key) is None):
                epochs.append({"epoch": None, **metrics})
        final = epochs[-1] if epochs and not diverged else {}
        final_acc = final.get("test_accuracy")
        summary = {
            "schedule": self.cfg.schedule, "model": self.cfg.model, "dataset": self.cfg.dataset,
            "stages": self.S, "ppv": self.ppv, "workers": self.P, "microbatches": self.M,
            "batch_size": self.cfg.batch_size, "lr": self.cfg.lr, "momentum": self.cfg.momentum,
            "weight_decay": self.cfg.weight_decay, "lr_schedule": self.cfg.lr_schedule,
            "seed": self.cfg.seed, "iterations": self.total, "batches_per_epoch": self.bpe,
            "epochs": self.cfg.epochs,
            "steps_done": len(losses),
            "losses": [x if math.isfinite(x) else None for x in losses],
            "final_loss": (losses[-1] if losses and math.isfinite(losses[-1]) else None),
            "final_test_accuracy": final_acc,
            "task": self.task,
            "final_val_loss": final.get("val_loss"),
            "final_val_bpc": final.get("val_bpc"),
            "optimizer": self.cfg.optimizer,
            "epoch_metrics": epochs,
            "staleness": self.sched.versions.staleness(),
            "weight_inconsistent_stages": self.sched.versions.inconsistent_stages(),
            "policy": self.sched.policy.value,
            "schedule_fingerprint": self.sched.fingerprint(),
            "versions_match": self.versions_match(),
            "wall_time_s": round(self._now(), 4),
            "diverged": diverged,
            "diverged_at": st.diverged_at,
            "data_note": self.stream.data.note,
            "stash_peak_bytes": sum(r.stash_peak_bytes for row in self.rts for r in row),
            "inflight_peak_bytes": self.peak_inflight_bytes,
            "mitigations": {k: getattr(self.cfg, k) for k in (
                "weight_prediction", "spike_compensation", "pipemare_lr", "pipemare_correction",
                "staleness_lr", "warmup", "compression", "nesterov_lookahead", "error_feedback")},
        }
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
