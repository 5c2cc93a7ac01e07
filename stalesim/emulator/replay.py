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

This module builds one run (:class:`Emulator`) and runs it with a run folder; the
replay itself is :class:`~stalesim.emulator.engine.ReplayEngine`'s, shared with the
batched emulation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from stalesim.atomic import AppendLog, ensure_dir, write_json_atomic, write_lines_atomic
from stalesim.emulator.engine import CKPT_NAME, READ_EVERY_CUDA, ReplayEngine, read_every_default
from stalesim.emulator.feed import BatchFeed
from stalesim.emulator.results import (
    eval_batch_size,
    eval_model,
    final_epochs,
    metric_key,
    run_summary,
    used_version_facts,
)
from stalesim.emulator.state import RunState
from stalesim.emulator.tally import Tally
from stalesim.errors import StalesimError
from stalesim.runtime.allreduce import mean_in_process
from stalesim.runtime.build import build_stage_modules, replicate, stage_runtimes
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import BatchStream, batch_stream
from stalesim.runtime.tasks import evaluate as task_evaluate
from stalesim.runtime.tasks import task_of
from stalesim.workloads.layered import LayeredModel

__all__ = ["CKPT_NAME", "READ_EVERY_CUDA", "Emulator", "check_request", "emulate", "read_every_default"]


class Emulator(ReplayEngine):
    """Build once, then :meth:`run`. ``out`` (a run folder) enables logs and checkpoints.
    The replay itself is :class:`~stalesim.emulator.engine.ReplayEngine`'s."""

    def __init__(self, cfg: TrainConfig, *, out: str | os.PathLike[str] | None = None,
                 checkpoint_every: int = 0, progress: bool | None = None,
                 stream: BatchStream | None = None, model: LayeredModel | None = None,
                 read_every: int | None = None, tensorboard: str | os.PathLike[str] | None = None) -> None:
        """``model``: a LayeredModel to use instead of ``build_model(cfg.model)`` (tests,
        bring-your-own models); ``stream``: a prepared batch stream (saves reloading data);
        ``read_every``: batches between host reads of the losses (see
        :meth:`stalesim.emulator.tally.TallyBase.read_out`; default :func:`read_every_default`);
        ``tensorboard``: a folder the run's scalars are written to while it trains."""
        from stalesim.runtime.build import run_model

        self.cfg = cfg.check()
        self.out = Path(out) if out is not None else None
        self.tensorboard = Path(tensorboard) if tensorboard is not None else None
        self.checkpoint_every = int(checkpoint_every)
        self.progress = progress
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise StalesimError(f"device: {cfg.device} requested but no CUDA device is visible")
        base: LayeredModel = model if model is not None else run_model(cfg)
        self.input_shape = base.input_shape
        self.task = task_of(cfg)
        self.stream = stream if stream is not None else batch_stream(cfg, input_shape=base.input_shape)
        self.bpe = self.stream.batches_per_epoch
        self.total = cfg.total_iterations(self.bpe)
        self.sched = cfg.build_schedule(self.total, self.bpe)
        self.S, self.P = self.sched.stages, self.sched.workers
        self.M = self.sched.microbatches if self.sched.uses_micro else 1
        first = build_stage_modules(cfg, self.sched, model=base, device=self.device)
        self.ppv = first.ppv
        replicas = [first] + [replicate(first, cfg, self.sched) for _ in range(self.P - 1)]
        self.models = [r.model for r in replicas]
        self.stage_mods = [r.stages for r in replicas]
        self.rts = {}
        for w, mods in enumerate(replicas):
            rts = stage_runtimes(cfg, self.sched, mods, worker=w, stages=range(self.S),
                                 device=self.device, total=self.total)
            self.rts.update({(w, s): rts[s] for s in range(self.S)})
        self._mean = mean_in_process
        self._init_replay(read_every)
        self.state: RunState[float, int] = RunState()
        self.feed = BatchFeed(self.stream, self.device, self.handoff, workers=self.P, micros=self.M,
                              readers=self.label_readers)
        self.tally: Tally = Tally(self.state, cfg, self.evaluate_metrics, bpe=self.bpe, total=self.total,
                                  workers=self.P, losses_per_batch=self.losses_per_batch,
                                  read_every=self.read_every, clock=self.now)

    def evaluate(self, worker: int = 0) -> float | None:
        """The evaluation metric with the current weights of ``worker`` (eval mode): test
        accuracy (classifiers) or validation loss in nats per character (LM)."""
        return self.evaluate_metrics(worker).get(metric_key(self.task))

    @torch.no_grad()
    def evaluate_metrics(self, worker: int = 0) -> dict[str, float | None]:
        """``{"test_accuracy"}`` or ``{"val_loss", "val_bpc"}`` (:func:`stalesim.runtime.tasks.evaluate`)."""
        if self.task != "lm" and self.stream.data.test_x is None:
            return {"test_accuracy": None}
        with eval_model(self.stage_mods[worker]) as forward:
            return task_evaluate(forward, self.stream.test_batches(eval_batch_size(self.task)),
                                 self.device, self.task)

    def run(self, resume: bool = False) -> dict[str, Any]:
        """Train (from the run folder's checkpoint with ``resume``) and return the summary."""
        from stalesim.emulator import checkpoint as ckpt

        if self.out is not None:
            ensure_dir(self.out)
            if resume:
                ckpt.load(self, self.out / CKPT_NAME)
            else:
                write_json_atomic(self.out / "config.json", {"train": self.cfg.to_dict(),
                                                             "checkpoint_every": self.checkpoint_every})
            # a live log (see stalesim.atomic.AppendLog), rewritten up to the checkpoint on resume
            self.tally.logs = [AppendLog(self.out / "metrics.jsonl",
                                         (json.dumps(rec) for rec in self.state.metrics))]
        elif resume:
            raise StalesimError("resume: needs --out RUN_DIR (the run folder holding the checkpoint)")
        if self.tensorboard is not None:
            from stalesim.launch.tb_scalars import RunScalars

            kept = [r["step"] for r in self.state.metrics if "step" in r]  # a resumed run's logged steps
            self.tally.live = RunScalars(self.tensorboard, batches_per_epoch=self.bpe, last_step=self.total - 1,
                                         purge_step=max(kept) + 1 if kept else None)
        try:
            self.replay_s = round(self.replay(bar=True), 4)
        except BaseException:
            if self.tally.live is not None:  # a failed run's curve so far stays readable
                self.tally.live.close()
            raise
        finally:
            self.tally.close_logs()
        summary = self.finish()
        if self.tally.live is not None:
            self.tally.live.summary(summary)
            self.tally.live.close()
        return summary

    def finish(self) -> dict[str, Any]:
        """The summary of the run so far (written to the run folder, with ``versions.jsonl``)."""
        st = self.state
        # a paused run reports its first `horizon` batches: the run of that length (a later
        # batch's loss may be known already, or its divergence, which that run never meets)
        h = self.horizon
        losses = [st.losses[t] for t in sorted(st.losses) if t < h]
        diverged_at = st.diverged_at if st.diverged_at is None or st.diverged_at < h else None
        # no final evaluation of a paused run: its weights have some updates of later batches
        epochs = (list(st.epochs) if self.paused else
                  final_epochs(self.task, self.cfg, st.epochs, diverged_at is not None, self.evaluate_metrics))
        facts = used_version_facts(self.sched, self.rts)
        summary = run_summary(
            self, self.cfg, losses=losses, diverged_at=diverged_at, epochs=epochs,
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
