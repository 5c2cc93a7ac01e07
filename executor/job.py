"""One job on one rank: build the stage(s), run the list, gather, summarize (rank 0).

A job is a JSON-able dict (:func:`make_job`): the :class:`TrainConfig`, the run
folder, checkpoint settings. Every rank builds the *full* model from the zoo
with the run's seed (so every stage starts from the weights the emulator
starts from), splits it with the same partition, keeps its own stage(s), and
wraps each in a :class:`StageRuntime`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from stalesim.errors import StalesimError


def make_job(cfg: Any, *, out: str | None = None, checkpoint_every: int = 0,
             resume: str | None = None, evaluate: bool = True, label: str | None = None,
             keep_rows: bool = False, deterministic: bool = False) -> dict[str, Any]:
    """The JSON-able description of one run (``cfg``: TrainConfig or its dict).

    ``keep_rows``: the summary also carries every rank's per-action timings and the
    versions each runtime used (tests); ``deterministic``: the ranks call
    ``torch.use_deterministic_algorithms(True)``.
    """
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    return {"train": d, "out": out, "checkpoint_every": int(checkpoint_every or 0),
            "resume": resume, "evaluate": bool(evaluate), "label": label, "keep_rows": keep_rows,
            "deterministic": bool(deterministic)}


def plan(cfg: Any, batches_per_epoch: int | None = None):
    """(total batches, schedule) for a config; usable without torch. The schedule comes
    from the one IR call every consumer makes with the run's config."""
    from stalesim.schedule import build_schedule

    if cfg.iterations is None and batches_per_epoch is None:
        raise StalesimError("epochs: the executor needs the dataset size to count batches")
    N = cfg.total_iterations(batches_per_epoch or 0)
    return N, build_schedule(cfg.schedule_config(N, batches_per_epoch))


def stage_out_shapes(model: Any, stages: list[Any], dtype: torch.dtype) -> list[tuple[int, ...]]:
    """Per-sample output shape of every stage (a batch-1 forward in eval mode: no BN update).
    Token-id inputs stay integers; every stage output (what is sent on) is floating."""
    shapes = []
    with torch.no_grad():
        x = model.example_input(1)
        if x.is_floating_point():
            x = x.to(dtype)
        was = model.training
        model.eval()
        try:
            for st in stages:
                x = st(x)
                shapes.append(tuple(x.shape[1:]))
        finally:
            model.train(was)
    return shapes


def run_job(job: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Run one job on this rank; rank 0 returns the summary, the others None."""
    from executor.checkpoint import Checkpointer
    from executor.rank import Rank
    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream

    t_start = time.perf_counter()
    cfg = TrainConfig.from_dict(dict(job["train"]))
    cfg.device = str(ctx.device) if ctx.device.type == "cuda" else "cpu"
    cfg.check()
    if job.get("deterministic"):
        torch.use_deterministic_algorithms(True)
    from stalesim.workloads.zoo import build_model

    base = build_model(cfg.model, num_classes=cfg.num_classes, seed=cfg.seed)
    # batches per epoch: only the data reader (rank 0, stage 0 of worker 0) loads the data
    # set when counting by epochs; the count is broadcast.
    stream = None
    bpe: int | None = None
    need_bpe = cfg.iterations is None or cfg.switch_epoch is not None
    if not need_bpe:
        N, sched = plan(cfg)
    else:
        if ctx.rank == 0:
            stream = batch_stream(cfg, input_shape=base.input_shape)
            bpe = stream.batches_per_epoch
        box = [bpe]
        dist.broadcast_object_list(box, src=0)
        bpe = int(box[0])
        N, sched = plan(cfg, bpe)
    mods = build_stage_modules(cfg, sched, model=base)  # on the CPU; each rank moves its own stages
    model, stages = mods.model, mods.stages
    shapes = stage_out_shapes(model, stages, cfg.torch_dtype)
    if sched.num_devices != ctx.world:
        raise StalesimError(
            f"--devices: schedule {cfg.schedule!r} needs {sched.num_devices} devices, "
            f"the process group has {ctx.world}")
    mine = sched.stages_on(ctx.rank)
    if any(s == 0 for _, s in mine) and stream is None:
        stream = batch_stream(cfg, input_shape=model.input_shape)
    dev = ctx.device
    runtimes: dict[tuple[int, int], Any] = {}
    for w in sorted({w for w, _ in mine}):
        ours = [s for ww, s in mine if ww == w]
        for s, rt in stage_runtimes(cfg, sched, mods, worker=w, stages=ours, device=dev, total=N).items():
            runtimes[(w, s)] = rt
    ck = Checkpointer(job, ctx, sched, runtimes)
    start_index, restored = ck.restore()  # (0, None) unless resuming
    rank = Rank(ctx, sched, cfg, runtimes, stream, shapes, start_index=start_index,
                label_shape=tuple(getattr(model, "label_shape", ())))
    rank.init_static_bytes()
    if restored is not None:
        ck.apply(rank, restored)
    ck.attach(rank)
    setup_s = time.perf_counter() - t_start
    ctx.beacon.set("barrier before the run")
    dist.barrier()
    rank.rec.start_clock(_common_origin(ctx))
    rank.run()
    rows = rank.rec.finish()
    ctx.beacon.set("gathering results")
    peak = rank.peak_bytes
    if dev.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(dev))
    payload = {
        "rank": ctx.rank,
        "rows": rows,
        "losses": [[w, s, t, v] for (w, s, t), v in sorted(rank.losses.items())],
        "versions_used": {f"{w}:{s}": list(rt.versions_used) for (w, s), rt in runtimes.items()},
        "peak_memory_bytes": int(peak),
        "peak_memory_parts": None if dev.type == "cuda" else dict(rank.peak_parts or {}),
        "stash_peak_bytes": int(sum(rt.stash_peak_bytes for rt in runtimes.values())),
        "bytes_sent": rank.tr.bytes_sent,
        "setup_s": setup_s,
        "state": _stage_states(runtimes) if job.get("evaluate", True) else None,
    }
    gathered: list[Any] | None = [None] * ctx.world if ctx.rank == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    if ctx.rank != 0:
        return None
    from executor.results import summarize_job

    return summarize_job(job, cfg, sched, N, gathered, model=model, stages=stages, stream=stream,
                         device=dev)


def _common_origin(ctx: Any) -> float | None:
    """Rank 0's ``perf_counter`` right after the barrier, when every rank runs on this host
    (one monotonic clock): every rank's rows then share one origin exactly. None otherwise."""
    import socket

    if ctx.world <= 1 or ctx.device.type == "cuda":
        return None
    box: list[Any] = [(socket.gethostname(), time.perf_counter())]
    every: list[Any] = [None] * ctx.world
    dist.all_gather_object(every, box[0])
    hosts = {h for h, _ in every}
    return float(every[0][1]) if len(hosts) == 1 else None


def _stage_states(runtimes: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """Worker 0's trained stage weights (CPU), for the final test accuracy on rank 0."""
    out = {}
    for (w, s), rt in runtimes.items():
        if w == 0:
            out[str(s)] = {k: v.detach().cpu() for k, v in rt.module.state_dict().items()}
    return out


def load_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())
