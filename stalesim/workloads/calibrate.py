"""Measure this machine's link: alpha-beta fit, all-reduce times, CPU occupancy.

``stalesim calibrate`` spawns ``ranks`` local processes (torch.multiprocessing,
rendezvous on 127.0.0.1 and a free port, one torch thread per rank) and

1. ping-pongs tensors of each size between ranks 0 and 1 and fits
   t(n) = alpha + n / bandwidth to the one-way times (half the round trip) by
   least squares on *relative* error, so the 4-byte points determine alpha as
   much as the 16 MB points determine the bandwidth;
2. times all-reduces over all ranks at a few sizes (compared with the ring
   model in the output so you can see how well it fits);
3. measures how busy a transfer keeps the CPU (gloo only): rank 0 runs a
   fixed matmul loop alone (C seconds), then again while a second thread sends
   a stream that alone takes T seconds; occupancy = (C_with - C) / T, clamped
   to [0, 1]. NCCL transfers run on the GPU's copy engines: occupancy 0.

It writes the hardware JSON (:mod:`stalesim.workloads.hardware`) the
simulator reads, with the raw measurements under ``link.measured`` and
``allreduce.measured``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stalesim.devices import Devices
from stalesim.errors import StalesimError
from stalesim.limits import MAX_RANKS, MAX_REPEATS, check_int

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from stalesim.workloads.hardware import LinkSpec

__all__ = ["DEFAULT_SIZES", "calibrate", "check_args", "fit_alpha_beta", "rank_devices"]

DEFAULT_SIZES: tuple[int, ...] = tuple(4 * 4**k for k in range(12))  # 4 B .. 16 MiB
MAX_MESSAGE_BYTES = 1 << 30  # one message, allocated on every rank
_AR_SIZES = (4096, 262144, 4194304)
#: the fewest collectives timed per size (its mean needs many: the time has a long tail)
AR_SAMPLES = 40


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> tuple[float, float, float]:
    """Fit t = alpha + n / bw minimising relative error; returns (alpha, bw, max_rel_err).

    Weighted least squares with weights 1/t. alpha is clamped at 0; a
    non-positive slope (no measurable size dependence) gives bw = inf.
    """
    if len(sizes) != len(times) or len(sizes) < 2:
        raise StalesimError("sizes: need at least two message sizes to fit alpha and beta")
    w = [1.0 / max(t, 1e-12) for t in times]
    # minimise sum (w_i (a + b n_i - t_i))^2 : 2x2 normal equations
    s00 = sum(wi * wi for wi in w)
    s01 = sum(wi * wi * n for wi, n in zip(w, sizes))
    s11 = sum(wi * wi * n * n for wi, n in zip(w, sizes))
    r0 = sum(wi * wi * t for wi, t in zip(w, times))
    r1 = sum(wi * wi * n * t for wi, n, t in zip(w, sizes, times))
    det = s00 * s11 - s01 * s01
    if det <= 0:
        raise StalesimError("sizes: need at least two distinct message sizes")
    alpha = (r0 * s11 - r1 * s01) / det
    beta = (s00 * r1 - s01 * r0) / det
    if alpha < 0:  # refit slope through the origin
        alpha = 0.0
        beta = r1 / s11
    bw = 1.0 / beta if beta > 0 else math.inf
    pred = [alpha + (0.0 if math.isinf(bw) else n / bw) for n in sizes]
    err = max(abs(p - t) / t for p, t in zip(pred, times) if t > 0)
    return alpha, bw, err


# --------------------------------------------------------------- rank worker
def rank_devices(backend: str, ranks: int, devices: Devices | None = None) -> list[str]:
    """The torch device of each calibration rank, through :meth:`Devices.device_for` (the one
    rank -> device mapping): ``devices`` (the run's ``--devices``) when given, else GPUs
    ``0..ranks-1`` (nccl) or CPU ranks (gloo). The backend and the rank count must match it."""
    kind = "cuda" if backend == "nccl" else "cpu"
    if devices is None:
        devices = Devices(kind, tuple(range(ranks)))
    if devices.kind != kind:
        raise StalesimError(f"--devices: {devices} are {devices.kind} ranks, the {backend} backend needs "
                            f"{kind} ranks")
    if devices.count != ranks:
        raise StalesimError(f"ranks: {ranks} calibration ranks, but --devices {devices} has {devices.count}")
    return devices.rank_devices()


def _worker(rank: int, world: int, devices: list[str], store_path: str, sizes: list[int],
            repeats: int, out_path: str, timeout_s: float) -> None:
    """One calibration rank: the three measurements in order; rank 0 writes them to ``out_path``."""
    import torch.distributed as dist

    dev = _join_group(rank, world, devices, store_path, timeout_s)
    result: dict[str, Any] = {"p2p": _ping_pong(rank, dev, sizes, repeats),
                              "allreduce": _allreduce_times(world, dev, repeats)}
    if _backend(dev) == "gloo":  # how busy a transfer keeps the CPU (NCCL's: none)
        result.update(_occupancy(rank))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        from stalesim.atomic import write_json_atomic

        write_json_atomic(out_path, result)


def _join_group(rank: int, world: int, devices: list[str], store_path: str, timeout_s: float) -> torch.device:
    """Join the calibration group on this rank's device (nccl for a GPU, else gloo)."""
    import datetime

    import torch

    from stalesim.rendezvous import init_process_group

    torch.set_num_threads(1)
    dev = torch.device(devices[rank])
    backend = _backend(dev)
    if backend == "nccl":
        torch.cuda.set_device(dev)
    # a private FileStore and loopback sockets: no port open beyond 127.0.0.1; device_id binds
    # the NCCL group to this rank's GPU (its barriers then use it rather than guess one)
    init_process_group({"kind": "file", "path": store_path}, backend=backend, rank=rank, world=world,
                       timeout=datetime.timedelta(seconds=timeout_s),
                       device_id=dev if backend == "nccl" else None)
    return dev


def _backend(dev: torch.device) -> str:
    """The process-group backend of a rank on ``dev``."""
    return "nccl" if dev.type == "cuda" else "gloo"


def _sync(dev: torch.device) -> None:
    """Wait for the device's queued work (timings then include it); a no-op on CPU."""
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _ping_pong(rank: int, dev: torch.device, sizes: list[int], repeats: int) -> list[dict[str, float]]:
    """One-way times between ranks 0 and 1 per message size (half the round trip; rank 0's
    list, empty elsewhere). Small messages get more repeats: they are noisier."""
    import torch
    import torch.distributed as dist

    p2p: list[dict[str, float]] = []
    for n in sizes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32, device=dev)
        reps = repeats * (4 if n <= 65536 else 2 if n <= 1 << 20 else 1)
        samples = []
        dist.barrier()  # once per size; the ping-pongs then run back to back
        for r in range(reps + 2):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
                _sync(dev)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
                _sync(dev)
            if r >= 2:
                samples.append((time.perf_counter() - t0) / 2)
        if rank == 0:
            p2p.append({"bytes": buf.numel() * 4, "seconds": statistics.median(samples),
                        "min_s": min(samples), "max_s": max(samples)})
    return p2p


def _allreduce_times(world: int, dev: torch.device, repeats: int) -> list[dict[str, float]]:
    """All-reduce time at each of :data:`_AR_SIZES` over :data:`AR_SAMPLES` (at least)
    back-to-back collectives after two warm-up ones: the median (``seconds``) and the mean
    (``mean_s``). A gloo collective's time has a long tail on a shared machine (0.8 MB on 2
    vCPUs: median 1.4-2.8 ms, mean 2.6-2.9 ms, one in ten above 4.5 ms), and a run pays the
    mean every iteration, so the prediction fits the means (``validate``'s
    :func:`~stalesim.validate.costmodel.link_from_comm`)."""
    import torch
    import torch.distributed as dist

    ar: list[dict[str, float]] = []
    for n in _AR_SIZES:
        buf = torch.ones(n // 4, dtype=torch.float32, device=dev)
        samples = []
        dist.barrier()
        _sync(dev)
        for r in range(max(repeats, AR_SAMPLES) + 2):
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            _sync(dev)
            if r >= 2:
                samples.append(time.perf_counter() - t0)
        ar.append({"bytes": n, "workers": world, "seconds": statistics.median(samples),
                   "mean_s": statistics.fmean(samples)})
    return ar


def _occupancy(rank: int) -> dict[str, Any]:
    """CPU occupancy of a gloo transfer (module doc, step 3), then one core's compute and copy
    speed: rank 0's entries of the result (``occupancy``, ``core_flops``, ``core_copy_Bps``);
    rank 1 receives the streams; the other ranks only meet the barriers."""
    import torch
    import torch.distributed as dist

    a = torch.randn(192, 192)
    chunk = torch.zeros(1 << 18)  # 1 MiB
    dist.barrier()
    c_alone = 0.0  # rank 0's alone: the stream is sized from it
    if rank == 0:
        _compute(a)
        c_alone = statistics.median(_compute(a) for _ in range(3))
    k = _stream_messages(rank, chunk, c_alone)
    dist.barrier()
    t_alone = _stream(rank, chunk, k)
    dist.barrier()
    if rank == 1:
        _receive(chunk, 3 * k)
    if rank != 0:
        return {}
    c_with = statistics.median(_compute_while_sending(a, chunk, k) for _ in range(3))
    occ = min(1.0, max(0.0, (c_with - c_alone) / t_alone)) if t_alone > 0 else 0.0
    return {"occupancy": {"compute_alone_s": c_alone, "compute_with_transfer_s": c_with,
                          "transfer_alone_s": t_alone, "messages": k,
                          "message_bytes": chunk.numel() * 4, "occupancy": occ},
            **_core_speeds()}


def _compute(a: torch.Tensor) -> float:
    """Seconds of a fixed matmul loop (the CPU work a transfer competes with)."""
    import torch

    t0 = time.perf_counter()
    for _ in range(250):
        torch.mm(a, a)
    return time.perf_counter() - t0


def _stream_messages(rank: int, chunk: torch.Tensor, c_alone: float) -> int:
    """How many ``chunk`` messages make a stream that alone lasts about ``c_alone / 2``
    (rank 0 times four, every rank gets the count)."""
    import torch
    import torch.distributed as dist

    n_msgs = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        t0 = time.perf_counter()
        for _ in range(4):
            dist.send(chunk, 1)
        per = (time.perf_counter() - t0) / 4
        n_msgs[0] = max(2, int(0.5 * c_alone / max(per, 1e-6)))
    elif rank == 1:
        _receive(chunk, 4)
    dist.broadcast(n_msgs, 0)
    return int(n_msgs[0])


def _stream(rank: int, chunk: torch.Tensor, k: int) -> float:
    """Rank 0 sends ``k`` messages to rank 1: the seconds on rank 0 (0 elsewhere)."""
    import torch.distributed as dist

    if rank == 0:
        t0 = time.perf_counter()
        for _ in range(k):
            dist.send(chunk, 1)
        return time.perf_counter() - t0
    if rank == 1:
        _receive(chunk, k)
    return 0.0


def _receive(chunk: torch.Tensor, k: int) -> None:
    import torch.distributed as dist

    for _ in range(k):
        dist.recv(chunk, 0)


def _send(chunk: torch.Tensor, k: int) -> None:
    import torch.distributed as dist

    for _ in range(k):
        dist.send(chunk, 1)


def _compute_while_sending(a: torch.Tensor, chunk: torch.Tensor, k: int) -> float:
    """:func:`_compute`'s seconds while a second thread sends ``k`` messages to rank 1."""
    import threading

    th = threading.Thread(target=_send, args=(chunk, k))
    th.start()
    seconds = _compute(a)
    th.join()
    return seconds


def _core_speeds() -> dict[str, float]:
    """One core's sgemm FLOP/s and copy bandwidth (read + write), for the device entry."""
    import torch

    big = torch.randn(512, 512)
    torch.mm(big, big)
    t0 = time.perf_counter()
    for _ in range(10):
        torch.mm(big, big)
    core_flops = 10 * 2 * 512**3 / (time.perf_counter() - t0)
    src = torch.randn(1 << 23)  # 32 MiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    return {"core_flops": core_flops, "core_copy_Bps": 5 * 2 * src.numel() * 4 / (time.perf_counter() - t0)}


def check_args(backend: str, ranks: int, sizes: Sequence[int] | None, repeats: int,
               devices: Devices | None = None) -> list[int]:
    """Validate calibrate's arguments before anything is spawned; returns the sorted sizes."""
    import torch

    if backend not in ("gloo", "nccl"):
        raise StalesimError(f"backend: expected gloo or nccl, got {backend!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise StalesimError(f"ranks: need an integer >= 2 to measure a link, got {ranks!r}")
    check_int("ranks", ranks, lo=2, hi=MAX_RANKS)
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise StalesimError("backend: nccl needs CUDA devices, none is visible (use gloo)")
        ids = devices.ids if devices is not None else tuple(range(ranks))
        if max(ids) >= torch.cuda.device_count():
            raise StalesimError(
                f"ranks: {ranks} NCCL ranks need GPUs {', '.join(map(str, ids))}, "
                f"{torch.cuda.device_count()} visible"
            )
    sz = sorted({int(x) for x in (sizes or DEFAULT_SIZES)})
    if len(sz) < 2 or sz[0] < 4:
        raise StalesimError(f"sizes: need at least two distinct sizes >= 4 bytes, got {sizes!r}")
    if sz[-1] > MAX_MESSAGE_BYTES:  # each size is allocated on every rank
        raise StalesimError(f"sizes: {sz[-1]} bytes is more than this tool sends in one message "
                            f"(at most {MAX_MESSAGE_BYTES:,})")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise StalesimError(f"repeats: expected an integer >= 1, got {repeats!r}")
    check_int("repeats", repeats, lo=1, hi=MAX_REPEATS)
    return sz


def calibrate(
    backend: str = "gloo",
    ranks: int = 2,
    *,
    sizes: Sequence[int] | None = None,
    repeats: int = 5,
    timeout_s: float = 120.0,
    devices: Devices | None = None,
) -> dict[str, Any]:
    """Run the measurements and return the hardware JSON object (see module doc).

    ``devices``: the ranks' devices (``validate --devices cuda:2,3`` calibrates GPUs 2 and 3);
    default GPUs ``0..ranks-1`` for nccl (:func:`rank_devices`)."""
    import torch

    from stalesim.workloads.hardware import hardware_from_dict

    sz = check_args(backend, ranks, sizes, repeats, devices)
    rank_devs = rank_devices(backend, ranks, devices)
    raw, elapsed = _run_ranks(ranks, rank_devs, sz, repeats, timeout_s)
    if backend == "gloo":
        device, occupancy, overlaps = _cpu_device(raw), raw["occupancy"]["occupancy"], False
    else:  # NCCL transfers run on the GPU's copy engines
        device, occupancy, overlaps = _gpu_device(rank_devs[0]), 0.0, True
    data = {
        "schema_version": 1,
        "device": device,
        "link": _link(backend, ranks, raw["p2p"]).to_dict(),
        "comm_overlaps_compute": overlaps,
        "cpu_comm_occupancy": occupancy,
        "allreduce": {"algorithm": "ring", "measured": raw["allreduce"]},
        "meta": {"backend": backend, "ranks": ranks, "rank_devices": rank_devs, "repeats": repeats,
                 "torch": torch.__version__, "calibrate_seconds": elapsed,
                 **({"occupancy": raw["occupancy"]} if "occupancy" in raw else {})},
    }
    hw = hardware_from_dict(data)
    for m in data["allreduce"]["measured"]:
        m["ring_model_s"] = hw.allreduce_time(m["bytes"], m["workers"])
    return data


def _run_ranks(ranks: int, rank_devs: list[str], sizes: list[int], repeats: int,
               timeout_s: float) -> tuple[dict[str, Any], float]:
    """Spawn the ranks (:func:`_worker`); rank 0's measurements and the seconds they took."""
    import torch.multiprocessing as mp

    from stalesim.rendezvous import PrivateStoreDir

    fd, out_path = tempfile.mkstemp(prefix="stalesim-calib-", suffix=".json")
    os.close(fd)
    t_start = time.perf_counter()
    try:
        try:
            with PrivateStoreDir("stalesim-calib-rdzv-") as rdzv:
                mp.spawn(_worker, args=(ranks, rank_devs, str(rdzv.store_path), sizes, repeats, out_path,
                                        timeout_s), nprocs=ranks, join=True)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:  # one line
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise StalesimError(f"calibrate: a rank failed ({last})") from None
        with open(out_path, encoding="utf-8") as fh:
            raw = json.load(fh)
    finally:
        os.unlink(out_path)
    return raw, time.perf_counter() - t_start


def _cpu_device(raw: dict[str, Any]) -> dict[str, Any]:
    """The device entry of a gloo calibration: the cpu-core catalog entry with the measured
    one-core speeds."""
    from stalesim.workloads.hardware import get_device

    base = get_device("cpu-core")
    return {**base.to_dict(), "name": "local CPU core (calibrated)",
            "peak_flops": {k: raw["core_flops"] for k in base.peak_flops},
            "mem_bandwidth_Bps": raw["core_copy_Bps"],
            "source": "measured by stalesim calibrate: 1-thread 512x512 sgemm FLOP/s "
                      "(used for every dtype) and 32 MiB copy bandwidth (read+write); "
                      "memory size from the cpu-core catalog assumption"}


def _gpu_device(rank0_device: str) -> dict[str, Any]:
    """The device entry of an NCCL calibration: rank 0's GPU from the catalog, or placeholder
    figures for a GPU the catalog does not know."""
    import torch

    from stalesim.workloads.hardware import get_device, gpu_catalog_key

    gpu0 = torch.device(rank0_device)
    name = torch.cuda.get_device_name(gpu0)
    mem = float(torch.cuda.get_device_properties(gpu0).total_memory)
    key = gpu_catalog_key(name, mem)
    if key:
        return get_device(key).to_dict()
    return {"name": name, "kind": "gpu", "peak_flops": {"float32": 1e12},
            "mem_bandwidth_Bps": 1e11, "memory_bytes": mem, "copy_engines": True,
            "source": "unknown GPU: placeholder figures, edit them"}


def _link(backend: str, ranks: int, p2p: list[dict[str, float]]) -> LinkSpec:
    """The link entry: alpha-beta fits of the median and of the fastest one-way times."""
    from stalesim.workloads.hardware import LinkSpec

    alpha, bw, err = fit_alpha_beta([p["bytes"] for p in p2p], [p["seconds"] for p in p2p])
    a_min, bw_min, _ = fit_alpha_beta([p["bytes"] for p in p2p], [p["min_s"] for p in p2p])
    return LinkSpec(
        name=f"{backend} local ({ranks} ranks, calibrated)", latency_s=alpha, bandwidth_Bps=bw,
        source="measured by stalesim calibrate: ping-pong one-way times, alpha-beta fit "
               "minimising relative error",
        key=f"{backend}-calibrated",
        extra={"fit_max_rel_error": err,
               "best_case": {"latency_s": a_min,
                             "bandwidth_Bps": None if math.isinf(bw_min) else bw_min,
                             "note": "alpha-beta fit of the fastest repeat per size"},
               "measured": p2p},
    )
