"""Batched emulation: K runs of one shape, schedule and partition trained at once.

:class:`BatchedEmulator` is a :class:`~stalesim.emulator.engine.ReplayEngine`, as the
single :class:`~stalesim.emulator.replay.Emulator` is, with one
:class:`~stalesim.runtime.batched.BatchedStageRuntime` per (worker, stage) whose
tensors carry a leading run axis (see :mod:`stalesim.runtime.batched`). The replay
order, the version table, the hand-offs, the checkpoints and the events are the
single emulator's, executed once for all K runs; what is per run is:

* the data: global batch t of run k is ``batch_stream(cfg_k)(t)`` (its own seed, so
  its own order), stacked along the run axis; micro-batch and worker shards are
  slices of the batch axis (axis 1) (:class:`~stalesim.emulator.feed.BatchedFeed`);
* the initial weights (each run's model is built from its own seed, then stacked),
  the optimizer state and hyper-parameters, the mitigations;
* the losses, training statistics, evaluation, divergence (a run that diverges stops
  being logged at that step, as a single run stops; the others go on), and the run
  folder: ``config.json``, ``metrics.jsonl``, ``summary.json``, ``versions.jsonl``
  exactly as a single run writes them, plus ``"batched"`` (K) in the summary
  (:class:`~stalesim.emulator.tally.BatchedTally`).

The batch folder (``out``) holds ``batch.json`` (the runs) and the checkpoint, which
resumes all K runs bitwise on CPU. Before anything large is allocated, the memory the
K runs need is estimated (weights, optimizer state, weight versions, in-flight
activations measured on one run's stages) and a batch that does not fit is refused in
one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from stalesim.atomic import AppendLog, ensure_dir, write_json_atomic, write_lines_atomic
from stalesim.emulator.engine import CKPT_NAME, ReplayEngine
from stalesim.emulator.feed import BatchedFeed
from stalesim.emulator.results import (
    eval_batch_size,
    eval_model,
    final_epochs,
    metric_key,
    run_summary,
    used_version_facts,
)
from stalesim.emulator.state import BatchedRunState
from stalesim.emulator.tally import BatchedTally
from stalesim.errors import StalesimError
from stalesim.runtime.batched import (
    BatchedStageRuntime,
    check_batch,
    check_fits,
    estimate_batch_bytes,
    mean_runs_in_process,
    saved_bytes_per_sample,
    wide,
)
from stalesim.runtime.build import StageModules, build_stage_modules, replicate
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import BatchStream, batch_stream
from stalesim.runtime.muon import muon_mask
from stalesim.runtime.rotation import rotation_nbytes
from stalesim.runtime.tasks import evaluate_runs, task_of
from stalesim.schedule import Schedule
from stalesim.schedule.liveness import stage_liveness

__all__ = ["BatchedEmulator", "BatchedRunState", "memory_estimate"]


class BatchedEmulator(ReplayEngine):
    """K emulations in one (see the module doc). ``out``: the batch folder (checkpoint);
    ``run_dirs``: one run folder per run (logs and summaries)."""

    def __init__(self, cfgs: Sequence[TrainConfig], *, out: str | os.PathLike[str] | None = None,
                 run_dirs: Sequence[str | os.PathLike[str]] | None = None, checkpoint_every: int = 0,
                 progress: bool | None = None, generic: bool = False, read_every: int | None = None) -> None:
        """``generic``: build every stage through vmap (:class:`~stalesim.runtime.batched.VmapWide`)
        even where the folded fast path applies (tests compare the two); ``read_every``: as
        :class:`~stalesim.emulator.replay.Emulator`'s."""
        from stalesim.runtime.build import run_model

        cfgs = [c.check() for c in cfgs]
        check_batch(cfgs)
        self.cfgs = cfgs
        self.runs = self.K = K = len(cfgs)
        self.cfg = cfg = cfgs[0]
        if run_dirs is not None and len(run_dirs) != K:
            raise StalesimError(f"batched: {len(run_dirs)} run folders for {K} runs")
        self.run_dirs = [Path(d) for d in run_dirs] if run_dirs is not None else None
        self.out = Path(out) if out is not None else None
        self.checkpoint_every = int(checkpoint_every)
        self.progress = progress
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise StalesimError(f"device: {cfg.device} requested but no CUDA device is visible")
        first = run_model(cfg)
        self.input_shape = first.input_shape
        self.task = task_of(cfg)
        self.streams = run_streams(cfgs, first.input_shape)
        self.stream = self.streams[0]
        self.bpe = self.stream.batches_per_epoch
        self.total = cfg.total_iterations(self.bpe)
        self.sched = cfg.build_schedule(self.total, self.bpe)
        self.S, self.P = self.sched.stages, self.sched.workers
        self.M = self.sched.microbatches if self.sched.uses_micro else 1
        per_run = [build_stage_modules(cfg, self.sched, model=first, device=self.device)]
        self.estimate = memory_estimate(cfgs, self.sched, per_run[0], self.device)
        for c in cfgs[1:]:
            model = run_model(c)
            per_run.append(build_stage_modules(c, self.sched, model=model, device=self.device))
        self.ppv = per_run[0].ppv
        for k, mods in enumerate(per_run):
            if mods.ppv != self.ppv:
                raise StalesimError(f"batched: run {k} is cut at PPV {mods.ppv}, run 0 at {self.ppv}; "
                                    "the runs of one batch must share the partition")
        self.rts = {}
        self.stage_mods = []
        for w, row in enumerate(wide_runtimes(cfgs, self.sched, per_run, self.device, self.total, generic)):
            self.rts.update({(w, s): rt for s, rt in enumerate(row)})
            self.stage_mods.append([rt.module for rt in row])
        self.models = self.stage_mods
        del per_run
        self._mean = mean_runs_in_process
        self._init_replay(read_every)
        self.state: BatchedRunState = BatchedRunState.fresh(K)
        self.feed = BatchedFeed(self.streams, self.device, self.handoff, workers=self.P, micros=self.M,
                                readers=self.label_readers)
        self.tally: BatchedTally = BatchedTally(
            self.state, cfgs, self.evaluate_metrics, bpe=self.bpe, total=self.total, workers=self.P,
            losses_per_batch=self.losses_per_batch, read_every=self.read_every, clock=self.now)

    @staticmethod
    def preflight(cfgs: Sequence[TrainConfig]) -> dict[str, int]:
        """Check that the runs can train as one batch and fit in memory, without building them
        (one run's model and the schedule only); returns the memory estimate (bytes)."""
        from stalesim.runtime.build import run_model

        cfgs = [c.check() for c in cfgs]
        check_batch(cfgs)
        cfg = cfgs[0]
        device = torch.device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise StalesimError(f"device: {cfg.device} requested but no CUDA device is visible")
        first = run_model(cfg)
        stream = batch_stream(cfg, input_shape=first.input_shape)
        total = cfg.total_iterations(stream.batches_per_epoch)
        sched = cfg.build_schedule(total, stream.batches_per_epoch)
        mods = build_stage_modules(cfg, sched, model=first, device=device)
        return memory_estimate(cfgs, sched, mods, device)

    def checkpoint_config(self) -> dict[str, Any]:
        return {f"run{k}.{name}": v for k, c in enumerate(self.cfgs) for name, v in c.to_dict().items()}

    @torch.no_grad()
    def evaluate_metrics(self, worker: int = 0) -> list[dict[str, float | None]]:
        """Per run: ``{"test_accuracy"}`` or ``{"val_loss", "val_bpc"}``."""
        if self.task != "lm" and self.stream.data.test_x is None:
            return [{"test_accuracy": None} for _ in range(self.K)]
        bs = eval_batch_size(self.task)
        batches = ((torch.stack(xs), torch.stack(ys)) for xs, ys in
                   (tuple(zip(*bb)) for bb in zip(*(st.test_batches(bs) for st in self.streams))))
        with eval_model(self.stage_mods[worker]) as forward:
            return evaluate_runs(forward, batches, self.device, self.task, self.K)

    def evaluate(self, worker: int = 0) -> list[float | None]:
        """Per run: the evaluation metric (:meth:`stalesim.emulator.replay.Emulator.evaluate`)."""
        key = metric_key(self.task)
        return [m.get(key) for m in self.evaluate_metrics(worker)]

    def run(self, resume: bool = False) -> list[dict[str, Any]]:
        """Train the K runs (from the batch folder's checkpoint with ``resume``); their summaries."""
        from stalesim.emulator import checkpoint as ckpt

        if self.out is not None:
            ensure_dir(self.out)
            if resume:
                ckpt.load(self, self.out / CKPT_NAME)
            else:
                write_json_atomic(self.out / "batch.json", {
                    "runs": len(self.cfgs), "checkpoint_every": self.checkpoint_every,
                    "run_dirs": None if self.run_dirs is None else [str(d) for d in self.run_dirs],
                    "train": [c.to_dict() for c in self.cfgs]})
        elif resume:
            raise StalesimError("resume: needs the batch folder holding the checkpoint")
        if self.run_dirs is not None:
            self.tally.logs = []
            for k, d in enumerate(self.run_dirs):
                ensure_dir(d)
                if not resume:
                    write_json_atomic(d / "config.json", {"train": self.cfgs[k].to_dict(),
                                                          "checkpoint_every": self.checkpoint_every,
                                                          "batched": self.K})
                self.tally.logs.append(AppendLog(d / "metrics.jsonl",
                                                 (json.dumps(r) for r in self.state.run_metrics[k])))
        try:
            self.replay_s = round(self.replay(bar=True), 4)
        finally:
            self.tally.close_logs()
        return self.finish()

    def finish(self) -> list[dict[str, Any]]:
        """The K runs' summaries (written to their run folders, with ``versions.jsonl``)."""
        st = self.state
        final_eval: list[dict[str, float | None]] | None = None

        def metrics_of(k: int) -> Callable[[], dict[str, Any]]:
            def metrics() -> dict[str, Any]:  # one evaluation of all K runs, on first need
                nonlocal final_eval
                if final_eval is None:
                    final_eval = self.evaluate_metrics()
                return final_eval[k]
            return metrics

        versions = self.versions_log()
        facts = used_version_facts(self.sched, self.rts)
        wall = round(self.now(), 4)
        stash = sum(r.stash_peak_bytes for r in self.rts.values()) // self.K
        out = []
        for k, c in enumerate(self.cfgs):
            dk = st.run_diverged_at[k]
            losses = [st.losses[t][k] for t in sorted(st.losses) if dk is None or t <= dk]
            epochs = final_epochs(self.task, c, st.run_epochs[k], dk is not None, metrics_of(k))
            summary = run_summary(
                self, c, losses=losses, diverged_at=dk, epochs=epochs, data_note=self.streams[k].data.note,
                facts=facts, stash_peak_bytes=stash, inflight_peak_bytes=self.peak_inflight_bytes // self.K,
                wall_time_s=wall, batched=self.K)
            summary.run_dir = None if self.run_dirs is None else str(self.run_dirs[k])
            d = summary.to_dict()
            out.append(d)
            if self.run_dirs is not None:
                write_lines_atomic(self.run_dirs[k] / "versions.jsonl", (json.dumps(rec) for rec in versions))
                write_json_atomic(self.run_dirs[k] / "summary.json", d)
        return out


def run_streams(cfgs: Sequence[TrainConfig], input_shape: tuple[int, ...]) -> list[BatchStream]:
    """One batch stream per run (its own seed); the data set is loaded once unless it
    depends on the seed (synthetic data)."""
    first = batch_stream(cfgs[0], input_shape=input_shape)
    out = [first]
    for c in cfgs[1:]:
        seeded = c.dataset == "synthetic" and c.seed != cfgs[0].seed
        out.append(batch_stream(c, input_shape=input_shape) if seeded
                   else batch_stream(c, data=first.data, input_shape=input_shape))
    return out


def wide_runtimes(cfgs: Sequence[TrainConfig], sched: Schedule, per_run: Sequence[StageModules],
                  device: torch.device, total: int, generic: bool) -> list[list[BatchedStageRuntime]]:
    """Per worker, the stage runtimes of the K runs in one: each stage's K modules (and heads)
    made one wide module, run k's worker replicas copied from its ``per_run[k]``."""
    cfg, K, S, P = cfgs[0], len(cfgs), sched.stages, sched.workers
    reps = [[mods] + [replicate(mods, c, sched) for _ in range(P - 1)] for mods, c in zip(per_run, cfgs)]

    def lr_fn(t: int) -> list[float]:
        return [c.lr_at(t, total) for c in cfgs]

    what = f"model {cfg.model!r}"
    rows = []
    for w in range(P):
        row = []
        for s in range(S):
            wmod = wide([reps[k][w].stages[s] for k in range(K)], what=what, generic=generic)
            heads = [h for k in range(K) if (h := reps[k][w].heads[s]) is not None]
            # the runs share the model and schedule: every run has this stage's head, or none
            assert len(heads) in (0, K), "the runs of one batch differ in auxiliary heads"
            head = wide(heads, what=what, generic=generic) if heads else None
            mask = muon_mask(reps[0][w].stages[s], output_stage=s == S - 1,
                             head=reps[0][w].heads[s]) if cfg.optimizer == "muon" else None
            row.append(BatchedStageRuntime(wmod, cfgs=cfgs, stage=s, num_stages=S, schedule=sched,
                                           device=device, worker=w, head=head, lr_fn=lr_fn,
                                           muon_mask=mask))
        rows.append(row)
    return rows


def memory_estimate(cfgs: Sequence[TrainConfig], sched: Any, mods: Any, device: torch.device) -> dict[str, int]:
    """Peak bytes of the K runs, estimated from run 0's stage modules (``mods``) and the
    schedule's liveness; a batch that does not fit is a one-line StalesimError."""
    cfg = cfgs[0]
    example = mods.model.example_input(2).to(device)
    if example.is_floating_point():
        example = example.to(cfg.torch_dtype)
    acts = saved_bytes_per_sample(mods.stages, example)
    params = [sum(p.numel() for p in st.parameters()) + (0 if h is None else sum(p.numel() for p in h.parameters()))
              for st, h in zip(mods.stages, mods.heads)]
    live = [lv for lv in stage_liveness(sched) if lv.worker == 0]
    P = sched.workers
    M = sched.microbatches if sched.uses_micro else 1
    esize = torch.empty((), dtype=cfg.torch_dtype).element_size()
    # basis rotation's factors and bases per run (the same in every run of a batch)
    extra = [sum(rotation_nbytes(p, cfg.basis_rotation_max_dim) // p.element_size() * esize
                 for m in (st, h) if m is not None for p in m.parameters())
             for st, h in zip(mods.stages, mods.heads)] if cfg.basis_rotation else []
    est = estimate_batch_bytes(runs=len(cfgs) * P, stage_params=params, act_per_sample=acts,
                               micro_batch=cfg.batch_size // (P * M), liveness=live, cfgs=cfgs,
                               element_size=esize, extra_state=extra)
    check_fits(est, device, len(cfgs))
    return est
