"""One job on one rank: build the stage(s), run the list, gather, summarize (rank 0).

A job is the JSON-able dict :func:`stalesim.executor.spec.make_job` makes: the checked
:class:`TrainConfig`, its schedule's fingerprint (verified here against the
schedule this rank builds), the run folder, checkpoint settings. Every rank builds the *full* model from the zoo
with the run's seed (so every stage starts from the weights the emulator
starts from), splits it with the same partition, keeps its own stage(s), and
wraps each in a :class:`StageRuntime`.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Hashable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import torch
import torch.distributed as dist

from stalesim.errors import StalesimError
from stalesim.executor.spec import needs_data_count, plan, verify_schedule

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from stalesim.executor.measure import Row
    from stalesim.executor.rank import Rank, RankContext, Runtimes
    from stalesim.executor.spec import Job
    from stalesim.runtime.build import StageModules
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import BatchStream
    from stalesim.schedule import Schedule
    from stalesim.workloads.layered import LayeredModel

#: cuBLAS's deterministic workspace setting (torch's reproducibility notes: ``:4096:8`` or
#: ``:16:8``; without one, deterministic mode raises on the first CUDA matmul)
CUBLAS_DETERMINISTIC = ":4096:8"


class Determinism(TypedDict):
    """What :func:`prepare_determinism` set for a job."""

    deterministic: bool
    warn_only: bool
    CUBLAS_WORKSPACE_CONFIG: str | None  # None off CUDA (cuBLAS only reads it there)


class RankPayload(TypedDict):
    """What each rank sends rank 0 after its run (``dist.gather_object``, pickled as the
    plain dict it is at run time); :func:`stalesim.executor.results.summarize_job` reads it."""

    rank: int
    rows: list[Row]  # the rank's measured actions (stalesim.executor.measure.Recorder)
    losses: list[list[float]]  # [worker, stage, batch, loss sum] per loss key (_loss_rows)
    versions_used: dict[str, list[tuple[str, int]]]  # "w:s" -> (action, weight version) per F/B/W
    peak_memory_bytes: int
    peak_memory_parts: dict[str, int] | None  # by component on the CPU; None on CUDA
    setup_peak_memory_bytes: int | None  # CUDA only
    run_start_allocated_bytes: int | None  # CUDA only
    stash_peak_bytes: int
    bytes_sent: int
    setup_s: float
    cpu_affinity: list[int]
    state: dict[str, dict[str, torch.Tensor]] | None  # worker 0's stage weights; None without evaluate


def prepare_determinism(deterministic: bool, device: torch.device,
                        environ: MutableMapping[str, str] | None = None) -> Determinism:
    """Set this rank's deterministic mode for a job; returns what was set.

    On CUDA, ``CUBLAS_WORKSPACE_CONFIG`` is set (unless it already holds one of cuBLAS's
    deterministic values) before the rank's first cuBLAS call, which is when cuBLAS reads
    it, and torch is told ``warn_only=True``: some CUDA backward kernels have no
    deterministic version (``AdaptiveAvgPool2d``'s, in every zoo CNN), and torch's
    ``warn_only`` is the documented way to run them with a warning naming the op instead
    of failing on it. (The zoo pools over non-overlapping windows, global average pooling,
    where that kernel adds one value per input element: the result does not depend on the
    order.) On the CPU every kernel has a deterministic version: strict mode. The mode is
    set for every job, so a later job of the same worker does not inherit it.
    """
    env = os.environ if environ is None else environ
    cuda = device.type == "cuda"
    if deterministic and cuda and env.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
        env["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC
    torch.use_deterministic_algorithms(bool(deterministic), warn_only=bool(deterministic and cuda))
    return {"deterministic": bool(deterministic), "warn_only": bool(deterministic and cuda),
            "CUBLAS_WORKSPACE_CONFIG": env.get("CUBLAS_WORKSPACE_CONFIG") if cuda else None}

# a folder: each CUDA rank records the allocator's history of its run and writes it there (a
# diagnosis of predicted vs measured peaks; costs time, so never on by default)
MEMORY_HISTORY_ENV = "STALESIM_CUDA_MEMORY_HISTORY"
MEMORY_HISTORY_ENTRIES = 200_000


class CudaPeak:
    """The CUDA allocator's peak of one run: from the end of setup (the allocator counts
    from process start, so setup, an earlier job and the model built on the CPU then moved
    would count) and without checkpoint writes (their state copies are not training
    memory): read and reset around every checkpoint hook."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.setup_peak = int(torch.cuda.max_memory_allocated(device))  # from process start
        # what is allocated when the run starts (the model's parameters, buffers, optimizer state,
        # and anything an earlier job of this process left): the peak is an absolute count
        self.base = int(torch.cuda.memory_allocated(device))
        self._peak = 0
        torch.cuda.reset_peak_memory_stats(device)
        self.history = os.environ.get(MEMORY_HISTORY_ENV) or None
        if self.history:
            # the allocator's own record of every allocation with its Python stack: what is live at
            # the peak, by who allocated it (torch.cuda.memory._snapshot; view it at pytorch.org/memory_viz)
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_ENTRIES, stacks="python")

    def dump_history(self, name: str) -> None:
        """Write the allocation history of the run to ``$STALESIM_CUDA_MEMORY_HISTORY/<name>.pickle``."""
        if not self.history:
            return
        import pickle

        from stalesim.atomic import write_bytes_atomic

        folder = Path(self.history)
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(folder / f"{name}.pickle", pickle.dumps(torch.cuda.memory._snapshot(self.device)))
        torch.cuda.memory._record_memory_history(enabled=None)

    def around(self, hook: Callable[[int], None]) -> Callable[[int], None]:
        """``hook`` (the rank's per-action checkpoint hook) with its allocations left out."""
        def wrapped(i: int) -> None:
            self._peak = max(self._peak, int(torch.cuda.max_memory_allocated(self.device)))
            try:
                hook(i)
            finally:
                torch.cuda.reset_peak_memory_stats(self.device)
        return wrapped

    def peak(self) -> int:
        """Peak bytes allocated since setup, checkpoint hooks excluded."""
        return max(self._peak, int(torch.cuda.max_memory_allocated(self.device)))


def stage_out_shapes(model: LayeredModel, stages: Sequence[nn.Module], dtype: torch.dtype) -> list[tuple[int, ...]]:
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


def run_job(job: Job, ctx: RankContext) -> dict[str, Any] | None:
    """Run one job on this rank; rank 0 returns the summary, the others None (the summary is
    :class:`stalesim.summary.RunSummary`'s JSON form, see :func:`summarize_job`)."""
    from stalesim.runtime.build import build_stage_modules
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream

    t_start = time.perf_counter()
    # an earlier job of this worker leaves its stage runtimes to the cyclic collector (their
    # hooks refer back to them): on a GPU their tensors would stay allocated and count in this
    # job's max_memory_allocated (seen on an H200: +2.2 MB per earlier ResNet-20 job, 54 MB and
    # 0.97 GB after jobs with more state); collect them before anything is measured
    gc.collect()
    # checked where the job was made (make_job); what this rank builds from it is verified
    # against the job's schedule fingerprint (verify_schedule)
    cfg = TrainConfig.from_dict(dict(job["train"]))
    base = _prepare(cfg, job, ctx)
    N, sched, stream = _plan_batches(cfg, ctx, base)
    verify_schedule(job, sched)
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
    runtimes = _own_runtimes(cfg, sched, mods, mine, ctx.device, N)
    rank, cuda_peak = _make_rank(job, ctx, sched, cfg, runtimes, stream, shapes, model)
    setup_s = time.perf_counter() - t_start
    ctx.beacon.set("barrier before the run")
    dist.barrier()
    rank.rec.start_clock(_common_origin(ctx))
    rank.run()
    rows = rank.rec.finish()
    ctx.beacon.set("gathering results")
    payload = _payload(job, cfg, ctx, rank, runtimes, rows, cuda_peak, setup_s)
    if ctx.rank != 0:
        dist.gather_object(payload, None, dst=0)
        return None
    gathered: list[RankPayload | None] = [None] * ctx.world
    dist.gather_object(payload, gathered, dst=0)
    from stalesim.executor.results import summarize_job

    # the gather fills every slot
    return summarize_job(job, cfg, sched, N, cast("list[RankPayload]", gathered), model=model, stages=stages,
                         stream=stream, device=ctx.device)


def _prepare(cfg: TrainConfig, job: Job, ctx: RankContext) -> LayeredModel:
    """Point ``cfg`` at this rank's device, set the job's determinism, make the user's modules
    importable; returns the full model."""
    from stalesim.plugins import add_import_roots
    from stalesim.runtime.build import run_model

    cfg.device = str(ctx.device) if ctx.device.type == "cuda" else "cpu"
    prepare_determinism(bool(job.get("deterministic")), ctx.device)
    # the user's --model/--dataset modules, importable here as they were where the run started
    add_import_roots(job.get("import_roots") or ())
    return run_model(cfg)


def _plan_batches(cfg: TrainConfig, ctx: RankContext, base: LayeredModel) -> tuple[int, Schedule, BatchStream | None]:
    """(batches N, schedule, rank 0's batch stream or None). Counting by epochs needs the
    batches per epoch: only the data reader (rank 0, stage 0 of worker 0) loads the data set,
    and broadcasts the count."""
    from stalesim.runtime.data import batch_stream

    stream = None
    if not needs_data_count(cfg):
        N, sched = plan(cfg)
        return N, sched, stream
    bpe: int | None = None
    if ctx.rank == 0:
        stream = batch_stream(cfg, input_shape=base.input_shape)
        bpe = stream.batches_per_epoch
    box = [bpe]
    dist.broadcast_object_list(box, src=0)
    count = box[0]
    assert count is not None  # rank 0's count, now on every rank
    N, sched = plan(cfg, int(count))
    return N, sched, stream


def _own_runtimes(cfg: TrainConfig, sched: Schedule, mods: StageModules, mine: list[tuple[int, int]],
                  dev: torch.device, N: int) -> Runtimes:
    """A StageRuntime per (worker, stage) this rank holds."""
    from stalesim.runtime.build import stage_runtimes

    runtimes: Runtimes = {}
    for w in sorted({w for w, _ in mine}):
        ours = [s for ww, s in mine if ww == w]
        for s, rt in stage_runtimes(cfg, sched, mods, worker=w, stages=ours, device=dev, total=N).items():
            runtimes[(w, s)] = rt
    return runtimes


def _make_rank(job: Job, ctx: RankContext, sched: Schedule, cfg: TrainConfig, runtimes: Runtimes,
               stream: BatchStream | None, shapes: list[tuple[int, ...]],
               model: LayeredModel) -> tuple[Rank, CudaPeak | None]:
    """The rank, restored from a checkpoint when resuming, with the checkpoint hook attached
    (on CUDA wrapped so that its allocations stay out of the peak), and the CUDA peak."""
    from stalesim.executor.checkpoint import Checkpointer
    from stalesim.executor.rank import Rank

    dev = ctx.device
    ck = Checkpointer(job, ctx, sched, runtimes)
    start_index, restored = ck.restore()  # (0, None) unless resuming
    rank = Rank(ctx, sched, cfg, runtimes, stream, shapes, start_index=start_index,
                label_shape=tuple(getattr(model, "label_shape", ())))
    rank.memory.init_static()
    if restored is not None:
        ck.apply(rank, restored)
    ck.attach(rank)
    from stalesim.executor.tb_live import live_loss

    rank.live_loss = live_loss(job, sched, ctx.rank, rank.actions, rank.losses, start_index)
    cuda_peak = CudaPeak(dev) if dev.type == "cuda" else None
    if cuda_peak is not None and rank.on_action_done is not None:
        rank.on_action_done = cuda_peak.around(rank.on_action_done)
    return rank, cuda_peak


def _payload(job: Job, cfg: TrainConfig, ctx: RankContext, rank: Rank, runtimes: Runtimes,
             rows: list[Row], cuda_peak: CudaPeak | None, setup_s: float) -> RankPayload:
    """What this rank sends rank 0 after its run: rows, losses, memory, traffic, weights."""
    from stalesim.runtime.affinity import available_cores

    dev = ctx.device
    peak = rank.memory.peak_bytes if cuda_peak is None else cuda_peak.peak()
    if cuda_peak is not None:
        cuda_peak.dump_history(f"{job.get('label') or cfg.schedule}-rank{ctx.rank}")
    return {
        "rank": ctx.rank,
        "rows": rows,
        "losses": _loss_rows(rank.losses),
        "versions_used": {f"{w}:{s}": list(rt.versions_used) for (w, s), rt in runtimes.items()},
        "peak_memory_bytes": int(peak),
        "peak_memory_parts": None if dev.type == "cuda" else dict(rank.memory.peak_parts or {}),
        # CUDA: the allocator's peak from process start through setup (the reported peak
        # counts from the end of setup)
        "setup_peak_memory_bytes": None if cuda_peak is None else cuda_peak.setup_peak,
        "run_start_allocated_bytes": None if cuda_peak is None else cuda_peak.base,
        "stash_peak_bytes": int(sum(rt.stash_peak_bytes for rt in runtimes.values())),
        "bytes_sent": rank.tr.bytes_sent,
        "setup_s": setup_s,
        "cpu_affinity": available_cores(),
        "state": _stage_states(runtimes) if job.get("evaluate", True) else None,
    }


def _loss_rows(losses: Mapping[Hashable, float]) -> list[list[float]]:
    """``[worker, stage, batch, loss]`` per entry of the rank's loss sums, in key order (the
    rank keys them by (worker, stage, batch))."""
    out = []
    for key, v in losses.items():
        assert isinstance(key, tuple) and len(key) == 3  # (worker, stage, batch)
        out.append([*key, v])
    return sorted(out)


def _common_origin(ctx: RankContext) -> float | None:
    """Rank 0's ``perf_counter`` right after the barrier, when every rank runs on this host
    (one monotonic clock): every rank's rows then share one origin exactly. None otherwise."""
    import socket

    if ctx.world <= 1 or ctx.device.type == "cuda":
        return None
    box: list[tuple[str, float]] = [(socket.gethostname(), time.perf_counter())]
    every: list[tuple[str, float]] = [("", 0.0)] * ctx.world
    dist.all_gather_object(every, box[0])
    hosts = {h for h, _ in every}
    return float(every[0][1]) if len(hosts) == 1 else None


def _stage_states(runtimes: Runtimes) -> dict[str, dict[str, torch.Tensor]]:
    """Worker 0's trained stage weights (CPU), for the final test accuracy on rank 0."""
    out = {}
    for (w, s), rt in runtimes.items():
        if w == 0:
            out[str(s)] = {k: v.detach().cpu() for k, v in rt.module.state_dict().items()}
    return out
