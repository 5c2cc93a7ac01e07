"""Rank 0: turn what every rank sent into the summary and the run folder.

Run folder (each file written atomically; ``summary.json`` last, so a folder
with a summary is complete): ``config.json`` (training config, devices,
schedule), ``metrics.jsonl`` (one line per mini-batch: loss, per-stage
losses, completion time), ``trace.json`` (Chrome trace, the simulator's labels
and tracks), ``versions.json`` (weight version each F/B/U used, per stage),
``summary.json``.

Divergence is recorded as the emulator records it: the first mini-batch whose
loss is not finite is ``diverged_at``, ``losses`` stops there (non-finite
values are ``null``, so every file is strict JSON), ``final_loss`` and
``test_accuracy`` are ``null``, and the run still ends with exit status 0 and
a complete folder. The ranks cannot stop at that batch without a pipeline-wide
handshake, so they run the rest of the schedule (on NaNs) first; the
per-step ``metrics.jsonl`` keeps every step that ran.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from stalesim.atomic import ensure_dir, write_lines_atomic, write_text_atomic
from stalesim.executor.measure import COMPUTE, Row, Timing, summarize
from stalesim.summary import RunSummary, config_fields, schedule_fields, version_facts

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from stalesim.executor.job import RankPayload  # job imports this module: a cycle at run time
    from stalesim.executor.spec import Job
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import BatchStream
    from stalesim.schedule import Schedule
    from stalesim.workloads.layered import LayeredModel


def _atomic_json(path: Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, allow_nan=False) + "\n")


def finite_or_none(v: object) -> float | None:
    """A loss as strict JSON allows it: non-finite (NaN, inf) and missing become None."""
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def divergence(losses: list[float | None]) -> int | None:
    """The first batch whose loss is not finite (the emulator's ``diverged_at``)."""
    for t, v in enumerate(losses):
        if v is not None and not math.isfinite(v):
            return t
    return None


def _rows_to_events(rows_by_rank: dict[int, list[Row]]) -> dict[str, Any]:
    from stalesim.trace import TraceEvent, chrome_trace

    events = []
    for d, rows in sorted(rows_by_rank.items()):
        for label, kind, _stage, _batch, _micro, _worker, s, e in rows:
            events.append(TraceEvent(label, round(s * 1e6, 3), round(max(0.0, e - s) * 1e6, 3), d,
                                     "compute" if kind in COMPUTE else "comm", kind))
    return chrome_trace(events, metadata={"source": "stalesim executor (measured)"})


def evaluate(model: LayeredModel, stages: Sequence[nn.Module], states: Mapping[str, Mapping[str, torch.Tensor]],
             stream: BatchStream | None, device: torch.device, task: str = "classify") -> dict[str, float | None]:
    """The evaluation metric of the full model with the trained stage weights (eval mode):
    ``{"test_accuracy"}`` (classifiers) or ``{"val_loss", "val_bpc"}`` (LM), computed by
    :func:`stalesim.runtime.tasks.evaluate` exactly as the emulator does."""
    from stalesim.runtime.tasks import evaluate as task_evaluate

    if stream is None or (task != "lm" and stream.data.test_x is None):
        return {}
    with torch.no_grad():
        for s, sd in states.items():
            stages[int(s)].load_state_dict(sd)
        model.to(device)
        was = model.training
        model.eval()
        try:
            return task_evaluate(model, stream.test_batches(64 if task == "lm" else 1000), device, task)
        finally:
            model.train(was)


def summarize_job(job: Job, cfg: TrainConfig, sched: Schedule, N: int, gathered: list[RankPayload], *,
                  model: LayeredModel, stages: Sequence[nn.Module], stream: BatchStream | None,
                  device: torch.device) -> dict[str, Any]:  # RunSummary's JSON form (+ rows with keep_rows)
    rows_by_rank = {p["rank"]: p["rows"] for p in gathered}
    S, P = sched.stages, sched.workers
    per: dict[tuple[int, int, int], float] = {}
    for p in gathered:
        for w, s, t, loss in p["losses"]:
            per[(int(w), int(s), int(t))] = loss  # ints in the list, typed with the float loss
    losses = []
    for t in range(N):  # accumulate as the emulator does: sum over workers of loss / P
        acc, seen = 0.0, False
        for w in range(P):
            v = per.get((w, S - 1, t))
            if v is not None:
                acc += v / P
                seen = True
        losses.append(acc if seen else None)
    diverged_at = divergence(losses)
    all_losses = [finite_or_none(v) for v in losses]  # every step that ran (metrics.jsonl)
    if diverged_at is not None:  # as the emulator: the losses end at the divergence
        losses = losses[:diverged_at + 1]
    losses = [finite_or_none(v) for v in losses]
    stage_losses = None
    if sched.local_loss:
        stage_losses = [[finite_or_none(per.get((0, s, t))) for t in range(N)] for s in range(S)]
    versions_used: dict[str, list[tuple[str, int]]] = {}
    for p in gathered:
        versions_used.update(p["versions_used"])
    facts = version_facts(sched, (u for entries in versions_used.values() for u in entries))
    win = sched.steady_window()  # the simulator's window, so run and simulate agree
    timing = summarize(rows_by_rank, batches=N, stages=S, samples_per_batch=cfg.batch_size,
                       window=win, whole_run=win is None)
    states: dict[str, dict[str, torch.Tensor]] = {}
    for p in gathered:
        states.update(p.get("state") or {})
    from stalesim.runtime.tasks import task_of

    task = task_of(cfg)
    metrics: dict[str, float | None] = {}
    if job.get("evaluate", True) and states and diverged_at is None:
        metrics = evaluate(model, stages, states, stream, device, task)
    evaluated = any(v is not None for v in metrics.values())
    out = job.get("out")
    summary = RunSummary(
        producer="run", label=job.get("label"), **schedule_fields(sched), **config_fields(cfg), **facts,
        task=task, data_note=getattr(getattr(stream, "data", None), "note", None),
        device_kind=device.type, iterations=N,
        batches_per_epoch=getattr(stream, "batches_per_epoch", None),
        run_dir=str(out) if out else None,
        steps_done=len(losses), losses=losses, final_loss=losses[-1] if losses else None,
        diverged=diverged_at is not None, diverged_at=diverged_at, stage_losses=stage_losses,
        final_test_accuracy=metrics.get("test_accuracy"), final_val_loss=metrics.get("val_loss"),
        final_val_bpc=metrics.get("val_bpc"),
        epoch_metrics=[{"epoch": None, **metrics}] if evaluated else [],
        iteration_time_s=timing["iteration_time_s"], throughput_samples_per_s=timing["throughput_samples_per_s"],
        utilization=timing["utilization"], utilization_whole_run=timing["utilization_whole_run"],
        wall_s=timing["wall_s"], warmup_batches_skipped=timing["warmup_batches_skipped"],
        timing_window=timing["timing_window"], time_by_kind_s=timing["time_by_kind_s"],
        setup_s=max(p["setup_s"] for p in gathered),
        cpu_affinity={str(p["rank"]): p.get("cpu_affinity") for p in gathered},
        stash_peak_bytes=sum(int(p.get("stash_peak_bytes") or 0) for p in gathered),
        peak_memory_bytes={str(p["rank"]): p["peak_memory_bytes"] for p in gathered},
        peak_memory_parts={str(p["rank"]): p.get("peak_memory_parts") for p in gathered},
        # CUDA: peak_memory_bytes counts from the end of setup without checkpoint writes; this
        # is the allocator's peak from process start through setup (None on the CPU)
        setup_peak_memory_bytes={str(p["rank"]): p.get("setup_peak_memory_bytes") for p in gathered},
        run_start_allocated_bytes={str(p["rank"]): p.get("run_start_allocated_bytes") for p in gathered},
        peak_memory_kind="cuda.max_memory_allocated" if device.type == "cuda"
        else ("tracked by unique storage (stalesim.runtime.memory): params + buffers + optimizer + "
              "stashed versions + grad buffers + in-flight inputs/outputs/saved tensors + receive "
              "buffers + unfinished sends + all-reduce buckets"),
    ).to_dict()
    if out:
        _write_run_dir(Path(out), job, cfg, sched, summary, timing, versions_used, rows_by_rank,
                       stage_losses, all_losses)
    if job.get("keep_rows"):
        summary["versions_used"] = versions_used
        summary["rows"] = {str(k): v for k, v in rows_by_rank.items()}
    return summary


def _write_run_dir(out: Path, job: Job, cfg: TrainConfig, sched: Schedule, summary: dict[str, Any],
                   timing: Timing, versions_used: dict[str, list[tuple[str, int]]],
                   rows_by_rank: dict[int, list[Row]], stage_losses: list[list[float | None]] | None,
                   all_losses: list[float | None]) -> None:
    ensure_dir(out)
    _atomic_json(out / "config.json", {
        "command": "run", "train": cfg.to_dict(), "devices": job.get("devices"),
        "timeout_s": job.get("timeout_s"), "threads": job.get("threads"),
        "checkpoint_every": job.get("checkpoint_every"), "resume": job.get("resume"),
        "schedule": {"name": sched.name, "stages": sched.stages, "batches": sched.batches,
                     "microbatches": sched.microbatches, "workers": sched.workers,
                     "devices": sched.num_devices, "policy": sched.policy.value,
                     "params": dict(sched.params)},
    })
    lines = []
    done = timing["batch_completion_s"]
    for t, loss in enumerate(all_losses):
        row: dict[str, object] = {"step": t, "loss": loss, "completed_s": done[t] if t < len(done) else None}
        if stage_losses is not None:
            row["stage_losses"] = [sl[t] for sl in stage_losses]
        lines.append(json.dumps(row, allow_nan=False))
    write_lines_atomic(out / "metrics.jsonl", lines)
    trace = _rows_to_events(rows_by_rank)
    write_text_atomic(out / "trace.json", json.dumps(trace))
    _atomic_json(out / "versions.json", versions_used)
    _atomic_json(out / "summary.json", summary)
