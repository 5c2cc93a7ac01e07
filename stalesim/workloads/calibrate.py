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
from typing import Any

from stalesim.devices import Devices
from stalesim.errors import StalesimError
from stalesim.limits import MAX_RANKS, MAX_REPEATS, check_int

__all__ = ["DEFAULT_SIZES", "calibrate", "check_args", "fit_alpha_beta", "rank_devices"]

DEFAULT_SIZES: tuple[int, ...] = tuple(4 * 4**k for k in range(12))  # 4 B .. 16 MiB
MAX_MESSAGE_BYTES = 1 << 30  # one message, allocated on every rank
_AR_SIZES = (4096, 262144, 4194304)


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
    import datetime

    import torch
    import torch.distributed as dist

    from stalesim.rendezvous import init_process_group

    torch.set_num_threads(1)
    dev = torch.device(devices[rank])
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(dev)
    # a private FileStore and loopback sockets: no port open beyond 127.0.0.1; device_id binds
    # the NCCL group to this rank's GPU (its barriers then use it rather than guess one)
    init_process_group({"kind": "file", "path": store_path}, backend=backend, rank=rank, world=world,
                       timeout=datetime.timedelta(seconds=timeout_s),
                       device_id=dev if backend == "nccl" else None)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    result: dict[str, Any] = {}
    # 1. ping-pong between ranks 0 and 1
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
                sync()
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
                sync()
            if r >= 2:
                samples.append((time.perf_counter() - t0) / 2)
        if rank == 0:
            p2p.append({"bytes": buf.numel() * 4, "seconds": statistics.median(samples),
                        "min_s": min(samples), "max_s": max(samples)})
    result["p2p"] = p2p

    # 2. all-reduce over all ranks
    ar = []
    for n in _AR_SIZES:
        buf = torch.ones(n // 4, dtype=torch.float32, device=dev)
        samples = []
        dist.barrier()
        sync()
        for r in range(repeats + 2):
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            sync()
            if r >= 2:
                samples.append(time.perf_counter() - t0)
        ar.append({"bytes": n, "workers": world, "seconds": statistics.median(samples)})
    result["allreduce"] = ar

    # 3. CPU occupancy of a transfer (gloo only)
    if backend == "gloo":
        import threading

        a = torch.randn(192, 192)

        def compute() -> float:
            t0 = time.perf_counter()
            for _ in range(250):
                torch.mm(a, a)
            return time.perf_counter() - t0

        chunk = torch.zeros(1 << 18)  # 1 MiB
        dist.barrier()
        if rank == 0:
            compute()
            c_alone = statistics.median(compute() for _ in range(3))
        # how long do N chunks take alone? pick N so that the stream lasts ~c_alone/2
        n_msgs = torch.zeros(1, dtype=torch.int64)
        if rank == 0:
            t0 = time.perf_counter()
            for _ in range(4):
                dist.send(chunk, 1)
            per = (time.perf_counter() - t0) / 4
            n_msgs[0] = max(2, int(0.5 * c_alone / max(per, 1e-6)))
        elif rank == 1:
            for _ in range(4):
                dist.recv(chunk, 0)
        dist.broadcast(n_msgs, 0)
        k = int(n_msgs[0])
        dist.barrier()
        if rank == 0:
            t0 = time.perf_counter()
            for _ in range(k):
                dist.send(chunk, 1)
            t_alone = time.perf_counter() - t0
        elif rank == 1:
            for _ in range(k):
                dist.recv(chunk, 0)
        dist.barrier()
        if rank == 0:
            withs = []
            for _ in range(3):
                th = threading.Thread(target=lambda: [dist.send(chunk, 1) for _ in range(k)])
                th.start()
                withs.append(compute())
                th.join()
            c_with = statistics.median(withs)
            occ = min(1.0, max(0.0, (c_with - c_alone) / t_alone)) if t_alone > 0 else 0.0
            result["occupancy"] = {"compute_alone_s": c_alone, "compute_with_transfer_s": c_with,
                                   "transfer_alone_s": t_alone, "messages": k,
                                   "message_bytes": chunk.numel() * 4, "occupancy": occ}
            # one-core compute and memory figures for the device entry
            big = torch.randn(512, 512)
            torch.mm(big, big)
            t0 = time.perf_counter()
            for _ in range(10):
                torch.mm(big, big)
            result["core_flops"] = 10 * 2 * 512**3 / (time.perf_counter() - t0)
            src = torch.randn(1 << 23)  # 32 MiB
            dst = torch.empty_like(src)
            dst.copy_(src)
            t0 = time.perf_counter()
            for _ in range(5):
                dst.copy_(src)
            result["core_copy_Bps"] = 5 * 2 * src.numel() * 4 / (time.perf_counter() - t0)
        elif rank == 1:
            for _ in range(3 * k):
                dist.recv(chunk, 0)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        from stalesim.atomic import write_json_atomic

        write_json_atomic(out_path, result)


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
    import torch.multiprocessing as mp

    sz = check_args(backend, ranks, sizes, repeats, devices)
    rank_devs = rank_devices(backend, ranks, devices)
    from stalesim.rendezvous import PrivateStoreDir

    fd, out_path = tempfile.mkstemp(prefix="stalesim-calib-", suffix=".json")
    os.close(fd)
    t_start = time.perf_counter()
    try:
        try:
            with PrivateStoreDir("stalesim-calib-rdzv-") as rdzv:
                mp.spawn(_worker, args=(ranks, rank_devs, str(rdzv.store_path), sz, repeats, out_path,
                                        timeout_s), nprocs=ranks, join=True)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:  # one line
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise StalesimError(f"calibrate: a rank failed ({last})") from None
        with open(out_path, encoding="utf-8") as fh:
            raw = json.load(fh)
    finally:
        os.unlink(out_path)
    elapsed = time.perf_counter() - t_start

    p2p = raw["p2p"]
    alpha, bw, err = fit_alpha_beta([p["bytes"] for p in p2p], [p["seconds"] for p in p2p])
    a_min, bw_min, _ = fit_alpha_beta([p["bytes"] for p in p2p], [p["min_s"] for p in p2p])
    from stalesim.workloads.hardware import LinkSpec, get_device

    if backend == "gloo":
        base = get_device("cpu-core")
        device = {**base.to_dict(), "name": "local CPU core (calibrated)",
                  "peak_flops": {k: raw["core_flops"] for k in base.peak_flops},
                  "mem_bandwidth_Bps": raw["core_copy_Bps"],
                  "source": "measured by stalesim calibrate: 1-thread 512x512 sgemm FLOP/s "
                            "(used for every dtype) and 32 MiB copy bandwidth (read+write); "
                            "memory size from the cpu-core catalog assumption"}
        occupancy = raw["occupancy"]["occupancy"]
        overlaps = False
    else:
        from stalesim.workloads.hardware import gpu_catalog_key

        gpu0 = torch.device(rank_devs[0])  # rank 0's GPU names the device entry
        name = torch.cuda.get_device_name(gpu0)
        mem = float(torch.cuda.get_device_properties(gpu0).total_memory)
        key = gpu_catalog_key(name, mem)
        if key:
            device = get_device(key).to_dict()
        else:
            device = {"name": name, "kind": "gpu", "peak_flops": {"float32": 1e12},
                      "mem_bandwidth_Bps": 1e11, "memory_bytes": mem, "copy_engines": True,
                      "source": "unknown GPU: placeholder figures, edit them"}
        occupancy = 0.0
        overlaps = True
    link = LinkSpec(
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
    data = {
        "schema_version": 1,
        "device": device,
        "link": link.to_dict(),
        "comm_overlaps_compute": overlaps,
        "cpu_comm_occupancy": occupancy,
        "allreduce": {"algorithm": "ring", "measured": raw["allreduce"]},
        "meta": {"backend": backend, "ranks": ranks, "rank_devices": rank_devs, "repeats": repeats,
                 "torch": torch.__version__, "calibrate_seconds": elapsed,
                 **({"occupancy": raw["occupancy"]} if "occupancy" in raw else {})},
    }
    from stalesim.workloads.hardware import hardware_from_dict

    hw = hardware_from_dict(data)
    for m in data["allreduce"]["measured"]:
        m["ring_model_s"] = hw.allreduce_time(m["bytes"], m["workers"])
    return data
