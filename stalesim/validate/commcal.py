"""Calibration of what a rank spends on each message, through the executor's own transport.

The simulator charges every communication action its CPU time
(``StageCosts.comm_ns``) and every message a one-way delay to the receiver
(``SimHardware.latency``/``bandwidth``). ``stalesim calibrate``'s ping-pong
measures round trips with both ranks idle; a pipeline rank instead posts a send
and goes on computing, and completes a receive (and posts the next) when it gets
there. This microbenchmark measures those quantities with
:class:`stalesim.executor.transport.Transport` (the executor's code path) between two
local processes, for several message sizes, and fits ``alpha + n * beta`` to each:

* ``post``: posting a send of n bytes (``Transport.send``) while the receiver computes;
* ``complete``: a receive whose message came while the receiver computed: waiting
  on it and posting the next receive of the same size (what a ``RECV_*`` action does);
* ``release``: waiting on a send that has completed (the executor does it where the
  IR proves completion, :mod:`stalesim.schedule.completion`);
* ``arrive``: from the start of the sender's post to the return of the
  receiver's wait, the receiver blocked in it and the sender computing after
  posting (as a pipeline stage does); the simulator's link latency is what it
  adds to ``post`` (:func:`stalesim.validate.costmodel.link_from_comm`), wake-up
  included. One host's monotonic clock times both processes.
* ``ar_post`` / ``ar_complete``: packing a gradient bucket of n bytes and
  starting the all-reduce / waiting on it once it has finished and unpacking (2
  ranks; the collective itself is ``calibrate``'s measured all-reduce).
* ``lost_sender`` / ``lost_receiver``: the compute a rank loses to a message that
  moves while it computes. Both ranks run the same fixed amount of work, once with a
  message from rank 0 to rank 1 posted as the work starts (the receive posted before)
  and once without, in alternating order; each sample is one rank's paired
  difference. A pinned CPU rank's transport threads share its core, so the bytes are
  written and read on the cores the ranks compute on; the post and the completing
  wait themselves are ``post`` and ``complete``, outside the timed work.

It runs no schedule and no model: its numbers are properties of this machine,
the transport and the message sizes, usable for any schedule.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stalesim.atomic import write_json_atomic
from stalesim.devices import Devices, parse_devices
from stalesim.errors import StalesimError
from stalesim.rendezvous import LOCAL_ADDR, free_port

if TYPE_CHECKING:  # pragma: no cover
    import torch

# paired samples of lost_* per repeat: a message takes a few percent of the work it moves
# during, about the spread of one timing, so these need more samples than the others
LOST_PAIRS = 3
QUANTITIES = ("post", "complete", "release", "arrive", "ar_post", "ar_complete", "lost_sender",
              "lost_receiver")


def fit_linear(sizes: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``t = alpha + beta * n`` (alpha, beta clamped at >= 0)."""
    n = len(sizes)
    if n != len(times) or n < 2:
        raise StalesimError("sizes: need at least two message sizes to fit")
    mx, my = sum(sizes) / n, sum(times) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    if sxx <= 0:
        raise StalesimError("sizes: need at least two distinct message sizes")
    beta = sum((x - mx) * (y - my) for x, y in zip(sizes, times)) / sxx
    beta = max(0.0, beta)
    alpha = max(0.0, my - beta * mx)
    return alpha, beta


def cost(fit: dict[str, float], nbytes: float) -> float:
    """Seconds of one quantity for a message of ``nbytes`` (``{"alpha_s", "beta_s_per_byte"}``)."""
    return fit["alpha_s"] + fit["beta_s_per_byte"] * nbytes


COMM_RANKS = 2  # the microbenchmark's ranks: a sender and a receiver


def comm_rank_devices(devices: Devices | str) -> list[str]:
    """The torch device of each of the microbenchmark's two ranks: the first two ranks of the
    run's ``--devices`` through the one rank -> device mapping (``cuda:2,3`` -> ``cuda:2``,
    ``cuda:3``; ``cpu:N`` -> ``cpu``, ``cpu``), so NCCL never gets two ranks on one GPU."""
    devs = parse_devices(devices) if isinstance(devices, str) else devices
    if devs.count < COMM_RANKS:
        raise StalesimError(f"--devices: the per-message calibration needs {COMM_RANKS} ranks, {devs} has "
                            f"{devs.count}")
    return devs.first(COMM_RANKS).rank_devices()


def stamp_tensor(device: Any) -> Any:
    """The one-element float64 clock stamp the sender passes to the receiver, on the rank's own
    device: NCCL sends device tensors only (a CPU tensor over NCCL is an error)."""
    import torch

    return torch.zeros(1, dtype=torch.float64, device=device)


def _worker(rank: int, port: int, sizes: list[int], repeats: int, out: str, timeout_s: float,
            devices: list[str], ranks: int = COMM_RANKS) -> None:  # pragma: no cover - a child process
    import torch
    import torch.distributed as dist

    from stalesim.lifetime import die_with_parent
    from stalesim.runtime.affinity import pin_rank

    die_with_parent()  # a rank left waiting in a collective after its parent was killed must not stay
    # where rank ``rank`` of the run's ``ranks`` runs: the executor pins its CPU ranks
    pin_rank(rank, ranks, "cuda" if devices[rank].startswith("cuda") else "cpu")
    torch.set_num_threads(1)
    dev = _init_group(rank, port, timeout_s, devices)
    probe = _Probe(rank, dev, timeout_s)
    probe.warm_up(sizes)
    for n in sizes:
        probe.measure(n, repeats)
    box: list[Any] = [None] * COMM_RANKS
    dist.all_gather_object(box, probe.res)
    if rank == 0:
        _write_medians(box, sizes, out)
    dist.destroy_process_group()


def _init_group(rank: int, port: int, timeout_s: float,
                devices: list[str]) -> torch.device:  # pragma: no cover - runs in a child process
    """Join the 2-rank process group on this rank's device (NCCL on a GPU, gloo on the CPU)."""
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR=LOCAL_ADDR, MASTER_PORT=str(port))
    dev = torch.device(devices[rank])
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    # device_id binds the NCCL group to this rank's GPU: barriers and all_gather_object then use
    # it instead of guessing a device from the rank number
    dist.init_process_group(backend, rank=rank, world_size=COMM_RANKS,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=dev if backend == "nccl" else None)
    return dev


class _Probe:  # pragma: no cover - runs in a child process
    """One rank's side of the microbenchmark: rank 0 sends, rank 1 receives; both time their
    side into ``res`` (quantity -> message size -> seconds per repeat). ``tag`` advances by 2
    per exchange, so every message of a run has its own tag pair."""

    def __init__(self, rank: int, dev: torch.device, timeout_s: float) -> None:
        import torch

        from stalesim.executor.transport import Transport

        self.rank, self.dev = rank, dev
        self.tr = Transport(rank, timeout_s)
        self.a = torch.randn(128, 128)  # the CPU work a rank "computes" while a message is in flight
        self.res: dict[str, dict[int, list[float]]] = {q: {} for q in QUANTITIES}
        self.stamp = stamp_tensor(dev)
        self.tag = 0

    def spin(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.a @ self.a

    def work(self, k: int) -> float:
        """Seconds of ``k`` fixed products: a fixed amount of compute, unlike :meth:`spin`."""
        a = self.a
        t0 = time.perf_counter()
        for _ in range(k):
            a @ a
        return time.perf_counter() - t0

    def warm_up(self, sizes: list[int]) -> None:
        """Every size once each way (first messages set up buffers)."""
        import torch

        tr, dev = self.tr, self.dev
        for n in sizes:
            self.tag += 2
            if self.rank == 0:
                tr.flush()
                tr.send(torch.zeros(max(1, n // 4), device=dev), 1, self.tag, "calibrate", "warm-up")
                tr.flush()
            else:
                tr.wait(tr.post_recv(torch.empty(max(1, n // 4), device=dev), 0, self.tag, "calibrate",
                                     "warm-up"))

    def measure(self, n: int, repeats: int) -> None:
        """``repeats`` samples of every quantity for messages of ``n`` bytes."""
        import torch
        import torch.distributed as dist

        numel = max(1, n // 4)
        x = torch.randn(numel, device=self.dev)
        for name in QUANTITIES:
            self.res[name][n] = []
        # lost_* is CPU compute lost to a transfer: on a GPU the transfer runs on the device and
        # the rank's compute is the GPU's, so it is not measured there (its fit stays 0). The
        # fixed work is as long as the receiver's spin in post_complete_release, so that it
        # covers the message's transfer; both ranks agree on the count.
        k = 0
        if self.dev.type == "cpu":
            per = self.work(20) / 20
            kt = torch.tensor([max(1, round((0.003 + n / 2e8) / max(per, 1e-7)))], dtype=torch.float64)
            dist.all_reduce(kt, op=dist.ReduceOp.MAX)
            k = int(kt.item())
        for i in range(repeats):
            self.post_complete_release(n, x)
            self.arrive(n, x)
            self.allreduce(n, x)
            for j in range(LOST_PAIRS if k else 0):
                self.lost(n, x, k, with_first=(i + j) % 2 == 0)

    def post_complete_release(self, n: int, x: torch.Tensor) -> None:
        """post + complete: the receiver's message is there before it waits; then release: the
        sender waits on its send once the receiver has the message."""
        import torch
        import torch.distributed as dist

        tr, dev, res, numel = self.tr, self.dev, self.res, x.numel()
        self.tag += 2
        tag = self.tag
        dist.barrier()
        if self.rank == 0:
            t0 = time.perf_counter()
            p = tr.send(x, 1, tag, "calibrate", "a message")
            res["post"][n].append(time.perf_counter() - t0)
        else:
            buf = torch.empty(numel, device=dev)
            p = tr.post_recv(buf, 0, tag, "calibrate", "a message")
            self.spin(0.003 + n / 2e8)  # computing while the message comes, as a stage does
            t0 = time.perf_counter()
            tr.wait(p)
            nxt = tr.post_recv(torch.empty(numel, device=dev), 0, tag + 1, "calibrate", "next")
            res["complete"][n].append(time.perf_counter() - t0)
        dist.barrier()
        if self.rank == 0:  # the receiver has the message: the send is complete
            t0 = time.perf_counter()
            tr.complete(p)
            res["release"][n].append(time.perf_counter() - t0)
            tr.send(torch.zeros(numel, device=dev), 1, tag + 1, "calibrate", "drain")
            tr.flush()
        else:
            tr.wait(nxt)

    def arrive(self, n: int, x: torch.Tensor) -> None:
        """The receiver blocks in its wait, the sender computes after posting; one clock."""
        import torch
        import torch.distributed as dist

        tr, stamp = self.tr, self.stamp
        self.tag += 2
        tag = self.tag
        dist.barrier()
        if self.rank == 0:
            time.sleep(0.002)
            stamp[0] = time.perf_counter()
            p = tr.send(x, 1, tag, "calibrate", "a message")
            self.spin(0.004)
            tr.complete(p)
            dist.send(stamp, 1, tag=tag + 1)
        else:
            buf = torch.empty(x.numel(), device=self.dev)
            p = tr.post_recv(buf, 0, tag, "calibrate", "a message")
            tr.wait(p)
            t1 = time.perf_counter()
            dist.recv(stamp, 0, tag=tag + 1)
            self.res["arrive"][n].append(t1 - float(stamp[0]))

    def lost(self, n: int, x: torch.Tensor, k: int, *, with_first: bool) -> None:
        """One paired sample of ``lost_sender`` (rank 0) and ``lost_receiver`` (rank 1): ``k``
        products with a message moving, minus the same without."""
        import torch
        import torch.distributed as dist

        tr, dev = self.tr, self.dev
        took = {}
        for with_msg in (with_first, not with_first):
            self.tag += 2
            p = None
            # the receive is posted before the barrier, as a stage posts its receives ahead, so
            # gloo finds it announced when the send comes. CPU ranks only (gloo): a receive left
            # pending across a collective would hang NCCL, which runs a communicator's work in order
            if with_msg and self.rank == 1:
                p = tr.post_recv(torch.empty(x.numel(), device=dev), 0, self.tag, "calibrate", "a message")
            dist.barrier()
            if with_msg and self.rank == 0:
                p = tr.send(x, 1, self.tag, "calibrate", "a message")
            took[with_msg] = self.work(k)
            if p is not None:
                if self.rank == 0:
                    tr.complete(p)
                else:
                    tr.wait(p)
        self.res["lost_sender" if self.rank == 0 else "lost_receiver"][n].append(took[True] - took[False])

    def allreduce(self, n: int, x: torch.Tensor) -> None:
        """All-reduce start (pack) and wait (unpack), both ranks."""
        import torch.distributed as dist

        from stalesim.runtime.allreduce import pack, unpack_mean

        dist.barrier()
        grads = [x.view(-1)]
        t0 = time.perf_counter()
        flat = pack(grads, "none", dtype=x.dtype, device=self.dev)
        w = dist.all_reduce(flat, async_op=True)
        self.res["ar_post"][n].append(time.perf_counter() - t0)
        time.sleep(0.005 + n / 2e8)  # the collective finishes: what remains is completing it
        t0 = time.perf_counter()
        w.wait()
        unpack_mean(flat, grads, 2)
        self.res["ar_complete"][n].append(time.perf_counter() - t0)


def _write_medians(box: list[Any], sizes: list[int], out: str) -> None:
    """Per quantity and size, the median over both ranks' samples, to ``out`` (JSON)."""
    merged: dict[str, dict[str, float]] = {}
    for q in QUANTITIES:
        merged[q] = {}
        for n in sizes:
            vals = [v for r in box for v in r[q].get(n, [])]
            merged[q][str(n)] = statistics.median(vals) if vals else 0.0
    # atomic (docs/CONTRACTS.md): the parent never reads a half-written file
    write_json_atomic(out, merged, compact=True)


def measure_comm(sizes: Sequence[int], *, repeats: int = 20, devices: Devices | str = "cpu:2",
                 timeout_s: float = 60.0) -> dict[str, Any]:
    """Run the microbenchmark on the first 2 ranks of ``devices`` (the run's ``--devices``);
    returns per quantity the median seconds per size and the fit
    (``{"alpha_s", "beta_s_per_byte"}``), plus the sizes, repeats and rank devices."""
    import torch.multiprocessing as mp

    rank_devs = comm_rank_devices(devices)
    sizes = sorted({max(4, int(n)) for n in sizes})
    if len(sizes) < 2:
        raise StalesimError("sizes: need at least two distinct message sizes")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "comm.json")
        try:
            mp.start_processes(_worker, args=(free_port(), sizes, repeats, out, timeout_s, rank_devs,
                                              (parse_devices(devices) if isinstance(devices, str)
                                               else devices).count),
                               nprocs=COMM_RANKS, start_method="spawn")
        except Exception as exc:  # noqa: BLE001 - a child failed: one line
            raise StalesimError(f"communication calibration failed: {exc}") from None
        with open(out) as fh:
            med = json.load(fh)
    fits = {}
    for q in QUANTITIES:
        xs = [float(n) for n in sizes]
        ys = [med[q][str(n)] for n in sizes]
        alpha, beta = fit_linear(xs, ys)
        fits[q] = {"alpha_s": alpha, "beta_s_per_byte": beta,
                   "median_s": {str(n): med[q][str(n)] for n in sizes}}
    # "device": rank 0's, as files written before the per-rank list had it
    return {"sizes": sizes, "repeats": repeats, "device": rank_devs[0], "rank_devices": rank_devs, **fits}
