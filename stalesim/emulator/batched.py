"""Batched emulation: K runs of one shape, schedule and partition trained at once.

:class:`BatchedEmulator` is the :class:`~stalesim.emulator.replay.Emulator` with one
:class:`~stalesim.runtime.batched.BatchedStageRuntime` per (worker, stage) whose
tensors carry a leading run axis (see :mod:`stalesim.runtime.batched`). The replay
order, the version table, the hand-offs, the checkpoints and the events are the
single emulator's, executed once for all K runs; what is per run is:

* the data: global batch t of run k is ``batch_stream(cfg_k)(t)`` (its own seed, so
  its own order), stacked along the run axis; micro-batch and worker shards are
  slices of the batch axis (axis 1);
* the initial weights (each run's model is built from its own seed, then stacked),
  the optimizer state and hyper-parameters, the mitigations;
* the losses, training statistics, evaluation, divergence (a run that diverges stops
  being logged at that step, as a single run stops; the others go on), and the run
  folder: ``config.json``, ``metrics.jsonl``, ``summary.json``, ``versions.jsonl``
  exactly as a single run writes them, plus ``"batched"`` (K) in the summary.

The batch folder (``out``) holds ``batch.json`` (the runs) and the checkpoint, which
resumes all K runs bitwise on CPU. Before anything large is allocated, the memory the
K runs need is estimated (weights, optimizer state, weight versions, in-flight
activations measured on one run's stages) and a batch that does not fit is refused in
one line.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from stalesim.atomic import AppendLog, ensure_dir, write_json_atomic, write_lines_atomic
from stalesim.emulator.replay import CKPT_NAME, Emulator
from stalesim.emulator.state import RunState
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
from stalesim.runtime.build import build_stage_modules, replicate
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import batch_stream
from stalesim.runtime.muon import muon_mask
from stalesim.runtime.rotation import rotation_nbytes
from stalesim.runtime.tasks import evaluate_runs, task_of
from stalesim.schedule import Action
from stalesim.schedule.liveness import stage_liveness


@dataclass
class BatchedRunState(RunState):
    """RunState with per-run lists: ``losses[t]``, ``loss_parts[t]``, ``correct[epoch]`` and
    ``seen[epoch]`` hold one entry per run; ``diverged_at`` is set when every run diverged."""

    runs: int = 1
    run_metrics: list[list[dict[str, Any]]] = field(default_factory=list)
    run_epochs: list[list[dict[str, Any]]] = field(default_factory=list)
    run_diverged_at: list[int | None] = field(default_factory=list)

    @classmethod
    def fresh(cls, runs: int) -> BatchedRunState:
        return cls(runs=runs, run_metrics=[[] for _ in range(runs)], run_epochs=[[] for _ in range(runs)],
                   run_diverged_at=[None] * runs)


class BatchedEmulator(Emulator):
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
        self.K = K = len(cfgs)
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
        self.streams = self._make_streams(first.input_shape)
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
        reps = [[mods] + [replicate(mods, c, self.sched) for _ in range(self.P - 1)]
                for mods, c in zip(per_run, cfgs)]
        total = self.total

        def lr_fn(t: int) -> list[float]:
            return [c.lr_at(t, total) for c in cfgs]

        what = f"model {cfg.model!r}"
        self.rts = {}
        self.stage_mods = []
        for w in range(self.P):
            row = []
            for s in range(self.S):
                wmod = wide([reps[k][w].stages[s] for k in range(K)], what=what, generic=generic)
                head = None
                if reps[0][w].heads[s] is not None:
                    head = wide([reps[k][w].heads[s] for k in range(K)], what=what, generic=generic)  # type: ignore[misc]
                mask = muon_mask(reps[0][w].stages[s], output_stage=s == self.S - 1,
                                 head=reps[0][w].heads[s]) if cfg.optimizer == "muon" else None
                row.append(BatchedStageRuntime(wmod, cfgs=cfgs, stage=s, num_stages=self.S, schedule=self.sched,
                                               device=self.device, worker=w, head=head, lr_fn=lr_fn,
                                               muon_mask=mask))
            self.rts.update({(w, s): rt for s, rt in enumerate(row)})
            self.stage_mods.append([rt.module for rt in row])
        self.models = self.stage_mods
        del per_run, reps
        self._init_replay(read_every)
        self.state = BatchedRunState.fresh(K)

    # ------------------------------------------------------------- building
    def _make_streams(self, input_shape: tuple[int, ...]) -> list[Any]:
        """One batch stream per run (its own seed); the data set is loaded once unless it
        depends on the seed (synthetic data)."""
        first = batch_stream(self.cfgs[0], input_shape=input_shape)
        out = [first]
        for c in self.cfgs[1:]:
            seeded = c.dataset == "synthetic" and c.seed != self.cfgs[0].seed
            out.append(batch_stream(c, input_shape=input_shape) if seeded
                       else batch_stream(c, data=first.data, input_shape=input_shape))
        return out

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

    # ---------------------------------------------------------------- data
    def _fetch(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*(st(t) for st in self.streams))
        return torch.stack(xs), torch.stack(ys)

    def _slice(self, z: torch.Tensor, worker: int, micro: int | None) -> torch.Tensor:
        """Worker shard, then micro-batch, along the batch axis (axis 1)."""
        if self.P > 1:
            n = z.shape[1] // self.P
            z = z[:, worker * n:(worker + 1) * n]
        if micro is not None and self.M > 1:
            n = z.shape[1] // self.M
            z = z[:, micro * n:(micro + 1) * n]
        return z

    def checkpoint_config(self) -> dict[str, Any]:
        return {f"run{k}.{name}": v for k, c in enumerate(self.cfgs) for name, v in c.to_dict().items()}

    # ------------------------------------------------------------- actions
    def _exec_loss(self, a: Action) -> None:
        r, s, t, m = a.worker, a.stage, a.batch, a.micro
        y = self._slice(self._data(t)[1], r, m)
        rt = self.rts[(r, s)]
        values = rt.loss(a, y)  # [K], on the device: read by _read_out
        if s == self.S - 1:
            st = self.state
            K = self.K
            ep = t // self.bpe
            with torch.no_grad():
                out = rt.inflight[(t, m)].y
                self._queued_correct.append((ep, (out.argmax(-1) == y).reshape(K, -1).sum(1)))
            seen = st.seen.setdefault(ep, [0] * K)
            for k in range(K):
                seen[k] += int(y[k].numel())
            self._queue_loss(t, values)
        self.handoff.batch_left[t] -= 1
        if self.handoff.batch_left[t] == 0:
            del self.handoff.batch_left[t], self._batch[t]

    def _add_loss(self, t: int, value: list[Any]) -> None:
        parts = self.state.loss_parts.setdefault(t, [0.0] * self.K)
        for k in range(self.K):
            parts[k] = parts[k] + value[k] / self.P

    def _add_correct(self, ep: int, count: list[Any]) -> None:
        corr = self.state.correct.setdefault(ep, [0] * self.K)
        for k in range(self.K):
            corr[k] += int(count[k])

    def _complete_batch(self, t: int, now: float) -> None:
        st = self.state
        losses = st.loss_parts.pop(t)
        st.losses[t] = losses
        self._log_steps(t, losses, now)
        for k, x in enumerate(losses):
            if not math.isfinite(x) and st.run_diverged_at[k] is None:
                st.run_diverged_at[k] = t
        if st.diverged_at is None and all(d is not None for d in st.run_diverged_at):
            st.diverged_at = t

    def _exec_allreduce_start(self, a: Action) -> None:
        key = (a.stage, a.batch)
        n = self.state.ar_issued.get(key, 0) + 1
        if n < self.P:
            self.state.ar_issued[key] = n
            return
        self.state.ar_issued.pop(key, None)
        mean_runs_in_process([self.rts[(r, a.stage)].grads(a.batch) for r in range(self.P)], self.cfg.compression)

    # ------------------------------------------------------------- logging
    def _alive(self, k: int, t: int) -> bool:
        """Run k still logs batch t (a diverged run stops at the batch it diverged on)."""
        d = self.state.run_diverged_at[k]
        return d is None or t <= d

    def _log_steps(self, t: int, losses: list[float], now: float) -> None:
        for k, c in enumerate(self.cfgs):
            if not self._alive(k, t):
                continue
            x = losses[k]
            rec = {"step": t, "epoch": t // self.bpe, "loss": x if math.isfinite(x) else None,
                   "lr": c.lr_at(t, self.total), "wall_time_s": now}
            self.state.run_metrics[k].append(rec)
            if self._metrics_fhs is not None:
                self._metrics_fhs[k].write_line(json.dumps(rec))

    @torch.no_grad()
    def evaluate_metrics(self, worker: int = 0) -> list[dict[str, float | None]]:  # type: ignore[override]
        """Per run: ``{"test_accuracy"}`` or ``{"val_loss", "val_bpc"}``."""
        if self.task != "lm" and self.stream.data.test_x is None:
            return [{"test_accuracy": None} for _ in range(self.K)]
        bs = self._eval_batch_size()
        batches = ((torch.stack(xs), torch.stack(ys)) for xs, ys in
                   (tuple(zip(*bb)) for bb in zip(*(st.test_batches(bs) for st in self.streams))))
        with self._eval_model(worker) as forward:
            return evaluate_runs(forward, batches, self.device, self.task, self.K)

    def evaluate(self, worker: int = 0) -> list[float | None]:  # type: ignore[override]
        key = "val_loss" if self.task == "lm" else "test_accuracy"
        return [m.get(key) for m in self.evaluate_metrics(worker)]

    def _end_epoch(self, epoch: int) -> None:
        st = self.state
        metrics = self.evaluate_metrics()
        correct = st.correct.pop(epoch, [0] * self.K)
        seen = st.seen.pop(epoch, [1] * self.K)
        now = round(self.now(), 4)
        for k in range(self.K):
            if st.run_diverged_at[k] is not None:
                continue
            rec = {"epoch": epoch, "train_accuracy": correct[k] / max(seen[k], 1), **metrics[k],
                   "wall_time_s": now}
            st.run_epochs[k].append(rec)
            st.run_metrics[k].append(rec)
            if self._metrics_fhs is not None:
                self._metrics_fhs[k].write_line(json.dumps(rec))

    # ---------------------------------------------------------------- run
    def run(self, resume: bool = False) -> list[dict[str, Any]]:  # type: ignore[override]
        from stalesim.emulator import checkpoint as ckpt

        self._metrics_fh = None
        self._metrics_fhs: list[AppendLog] | None = None
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
            self._metrics_fhs = []
            for k, d in enumerate(self.run_dirs):
                ensure_dir(d)
                if not resume:
                    write_json_atomic(d / "config.json", {"train": self.cfgs[k].to_dict(),
                                                          "checkpoint_every": self.checkpoint_every,
                                                          "batched": self.K})
                self._metrics_fhs.append(AppendLog(d / "metrics.jsonl",
                                                   (json.dumps(r) for r in self.state.run_metrics[k])))
        self._t0 = time.perf_counter()
        bar = self._bar()
        try:
            self._replay(bar)
            self._replay_s = round(time.perf_counter() - self._t0, 4)
        finally:
            if bar is not None:
                bar.close()
            for fh in self._metrics_fhs or []:
                fh.close()
        return self.finish()  # type: ignore[return-value]

    def replay(self) -> float:
        self._metrics_fhs = None
        return super().replay()

    def finish(self) -> list[dict[str, Any]]:  # type: ignore[override]
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
        facts = self.version_facts()
        wall = round(self.now(), 4)
        stash = sum(r.stash_peak_bytes for r in self.rts.values()) // self.K
        out = []
        for k, c in enumerate(self.cfgs):
            dk = st.run_diverged_at[k]
            losses = [st.losses[t][k] for t in sorted(st.losses) if dk is None or t <= dk]
            epochs = self._final_epochs(c, st.run_epochs[k], dk is not None, metrics_of(k))
            summary = self._summary(
                c, losses=losses, diverged_at=dk, epochs=epochs, data_note=self.streams[k].data.note,
                facts=facts, stash_peak_bytes=stash, inflight_peak_bytes=self.peak_inflight_bytes // self.K,
                wall_time_s=wall, batched=self.K)
            summary.run_dir = None if self.run_dirs is None else str(self.run_dirs[k])
            d = summary.to_dict()
            out.append(d)
            if self.run_dirs is not None:
                write_lines_atomic(self.run_dirs[k] / "versions.jsonl", (json.dumps(rec) for rec in versions))
                write_json_atomic(self.run_dirs[k] / "summary.json", d)
        return out


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
