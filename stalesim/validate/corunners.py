"""Measurements behind the cost model: per-action runtime overhead, and profiles taken
while co-runner processes keep the other cores busy.

Each function starts processes or times real arithmetic on this machine; the
model that consumes the numbers is :mod:`stalesim.validate.costmodel`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.lifetime import Parent, fresh_context
from stalesim.schedule.actions import UNSPLIT_COMPUTE_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.profile import Profile


def measure_overhead(*, threads: int = 1, device: str = "cpu", repeats: int = 200) -> dict[str, float]:
    """Per-action overhead of running F/LOSS/B/U through StageRuntime (seconds).

    A tiny stage (Linear 8->8 on a batch of 2) makes the arithmetic negligible;
    each action is timed through the runtime and as the bare torch calls the
    profiler times (block forward, cross-entropy, backward, SGD step); the
    difference (median over ``repeats``, >= 0) is the overhead a rank pays per
    action on top of the profile. A constant of this machine and software stack,
    not of the model or schedule.
    """
    import torch
    from torch import nn

    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.stage import StageRuntime
    from stalesim.schedule import Kind, ScheduleConfig, build_schedule

    old = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(threads)
    try:
        dev = torch.device(device)
        torch.manual_seed(0)
        n = repeats
        sched = build_schedule(ScheduleConfig("sequential", stages=1, batches=n + 2))
        cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="sequential", stages=1,
                          iterations=n + 2, batch_size=2, lr=1e-6, momentum=0.9)
        mod = nn.Sequential(nn.Linear(8, 8)).to(dev)
        rt = StageRuntime(mod, stage=0, num_stages=1, schedule=sched, cfg=cfg, device=dev)
        x = torch.randn(2, 8, device=dev)
        y = torch.randint(0, 8, (2,), device=dev)
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        measured = UNSPLIT_COMPUTE_NAMES
        rt_t: dict[str, list[float]] = {k: [] for k in measured}
        for t in range(n + 2):
            acts = [a for a in sched.device_actions[0] if a.batch == t]
            for a in acts:
                t0 = time.perf_counter()
                if a.kind is Kind.F:
                    rt.forward(a, x)
                elif a.kind is Kind.LOSS:
                    rt.loss(a, y)
                elif a.kind is Kind.B:
                    rt.backward(a, None)
                elif a.kind is Kind.U:
                    rt.update(a)
                sync()
                if t >= 2 and a.kind.value in rt_t:
                    rt_t[a.kind.value].append(time.perf_counter() - t0)
        # bare calls, as the profiler times them
        mod2 = nn.Sequential(nn.Linear(8, 8)).to(dev)
        opt = torch.optim.SGD(mod2.parameters(), lr=1e-6, momentum=0.9)
        raw: dict[str, list[float]] = {k: [] for k in measured}
        import torch.nn.functional as F

        for t in range(n + 2):
            t0 = time.perf_counter()
            out = mod2(x)
            sync()
            t1 = time.perf_counter()
            loss = F.cross_entropy(out, y)
            sync()
            t2 = time.perf_counter()
            loss.backward()
            sync()
            t3 = time.perf_counter()
            opt.step()
            sync()
            t4 = time.perf_counter()
            mod2.zero_grad(set_to_none=True)
            if t >= 2:
                raw["F"].append(t1 - t0)
                raw["LOSS"].append(t2 - t1)
                raw["B"].append(t3 - t2)
                raw["U"].append(t4 - t3)
        out = {k: max(0.0, statistics.median(rt_t[k]) - statistics.median(raw[k])) for k in measured}
        out["I"] = out["W"] = out["B"]  # each half of a split backward is one more dispatch
        return out
    finally:
        torch.set_num_threads(old)


def _busy_loop(model: str, batch_size: int, threads: int, device: str, stop: Any, ready: Any,  # pragma: no cover
               seed: int, go: Any = None, dataset: str | None = None, gen: Any = None,
               ack: Any = None, ranks: int = 1, error: Any = None,
               parent: Parent | None = None) -> None:  # (runs in a child process)
    """A co-runner: train ``model`` on random data until ``stop`` is set (while ``go`` is set).

    It trains as a rank does: the model's own example batch (token ids for a language
    model) and its task's loss. While paused it writes the pause generation it has seen
    (``gen``) into ``ack`` (:meth:`CoRunners.pause` waits for it): it reads the generation
    first and acknowledges only if ``go`` is still clear after that, so an acknowledgement
    of a pause always comes from a co-runner that is between steps and will not start one
    until it is resumed. A :class:`StalesimError` (a user's model that fails at this batch
    size) is passed back through ``error`` (:func:`_wait_ready` raises it) instead of a
    traceback on stderr. It dies with ``parent`` (the process that started it): a co-runner
    trains until told to stop, so one whose parent was killed would never stop.
    """
    from stalesim.lifetime import adopt, die_with_parent

    if parent is None:
        die_with_parent()
    else:
        adopt(parent)
    try:
        _train_until_stopped(model, batch_size, threads, device, stop, ready, seed, go, dataset, gen, ack, ranks)
    except StalesimError as exc:
        if error is None:
            raise
        error.value = str(exc).encode("utf-8", "replace")[:ERROR_BYTES - 1]
        raise SystemExit(2) from None


# the bytes of a co-runner's error passed back to the parent (the first line's start)
ERROR_BYTES = 300


def _train_until_stopped(model: str, batch_size: int, threads: int, device: str, stop: Any,  # pragma: no cover
                         ready: Any, seed: int, go: Any, dataset: str | None, gen: Any, ack: Any,
                         ranks: int) -> None:
    import torch

    from stalesim.runtime.affinity import pin_rank
    from stalesim.runtime.build import model_of
    from stalesim.runtime.tasks import loss_fn

    if ranks > 1:  # where rank ``seed`` of ``ranks`` would run (co-runner i stands for rank i + 1)
        pin_rank(seed, ranks, "cuda" if str(device).startswith("cuda") else "cpu")
    torch.set_num_threads(threads)
    dev = torch.device(device)
    net = model_of(model, dataset, seed=seed).to(dev).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.0, momentum=0.9)
    x, y = net.random_batch(batch_size, torch.Generator().manual_seed(seed))
    x, y = x.to(dev), y.to(dev)
    loss_of = loss_fn(net.task)
    first = True
    while not stop.is_set():
        if go is not None and not first and not go.is_set():
            if gen is not None and ack is not None:
                g = gen.value
                if not go.is_set():
                    ack.value = g
            go.wait(0.05)
            continue
        loss = loss_of(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if first:
            ready.set()
            first = False


class CoRunners:
    """``n`` processes that train ``model`` (same threads and device as a rank) to keep the
    other cores busy, the way the other ranks of a run do; paused and resumed between
    measurements (a context manager: started on entry, stopped on exit).

    :meth:`pause` returns only once every co-runner has finished its step and waits, so
    what is timed next runs alone; :meth:`resume` lets them compute again. Used for the
    contended profile, the alternating alone/contended profiles and the contended stage
    times (:mod:`stalesim.validate.stagetime`)."""

    def __init__(self, model: str, batch_size: int, n: int, *, threads: int = 1, device: str = "cpu",
                 dataset: str | None = None, timeout_s: float = 120.0, running: bool = True) -> None:
        if n < 1:
            raise StalesimError(f"co_runners: expected >= 1, got {n}")
        self.n, self.timeout_s = n, timeout_s
        ctx = fresh_context()
        self._stop, self._go = ctx.Event(), ctx.Event()
        self._gen = ctx.Value("q", 0)
        self._acks = [ctx.Value("q", 0) for _ in range(n)]
        self._readies = [ctx.Event() for _ in range(n)]
        self._errors = [ctx.Array("c", ERROR_BYTES) for _ in range(n)]
        if running:
            self._go.set()
        self._procs = [ctx.Process(target=_busy_loop,
                                   args=(model, batch_size, threads, device, self._stop, self._readies[i], i + 1,
                                         self._go, dataset, self._gen, self._acks[i], n + 1, self._errors[i],
                                         Parent.here()),
                                   daemon=True)
                       for i in range(n)]

    def __enter__(self) -> CoRunners:
        for p in self._procs:
            p.start()
        try:
            _wait_ready(self._procs, self._readies, self.timeout_s, self._errors)
            if not self._go.is_set():
                self.pause()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resume(self) -> None:
        self._go.set()

    def pause(self) -> None:
        """Stop the co-runners after their current step; wait until each has."""
        self._go.clear()
        with self._gen.get_lock():
            self._gen.value += 1
            g = self._gen.value
        deadline = time.monotonic() + self.timeout_s
        for p, ack in zip(self._procs, self._acks):
            while ack.value < g:
                if not p.is_alive():
                    raise StalesimError("contention: a co-runner process died")
                if time.monotonic() > deadline:
                    raise StalesimError("contention: a co-runner did not pause in time")
                time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._go.set()
        for p in self._procs:
            if p.pid is None:
                continue
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def contended_profile(model: str, batch_sizes: list[int], *, co_runners: int, threads: int = 1,
                      device: str = "cpu", repeats: int = 5, warmup: int = 2,
                      co_batch: int | None = None, timeout_s: float = 120.0,
                      dataset: str | None = None) -> Profile:
    """``profile_model`` while ``co_runners`` processes train the same model (same threads).

    This is what a CPU rank sees when the other ranks compute at the same time. ``dataset``:
    the data set whose input shape a user's model takes (:func:`~stalesim.runtime.build.model_of`).
    """
    from stalesim.workloads.profiler import profile_model

    with CoRunners(model, co_batch or batch_sizes[0], co_runners, threads=threads, device=device,
                   dataset=dataset, timeout_s=timeout_s):
        prof = profile_model(profiled_model(model, dataset), batch_sizes, device=device, threads=threads,
                             repeats=repeats, warmup=warmup)
    meta = dict(prof.meta or {})
    meta["co_runners"] = co_runners
    meta["note"] = (f"measured while {co_runners} other process(es) trained {model} "
                    f"with {threads} thread(s) each")
    return replace(prof, meta=meta)


def paired_profiles(model: str, batch_sizes: list[int], *, co_runners: int, threads: int = 1,
                    device: str = "cpu", repeats: int = 5, rounds: int = 2, co_batch: int | None = None,
                    timeout_s: float = 120.0, dataset: str | None = None) -> tuple[Profile, Profile]:
    """(alone, contended) profiles measured in alternating rounds.

    The co-runners stay alive and are paused between rounds, so the alone and
    the contended measurements interleave in time: on a machine whose
    background load drifts, both see the same drift and their ratio stays about
    the contention itself. Each profile is the per-layer median over rounds.
    """
    from stalesim.workloads.profiler import profile_model

    per = max(2, math.ceil(repeats / max(1, rounds)))
    alone: list[Profile] = []
    busy: list[Profile] = []
    with CoRunners(model, co_batch or batch_sizes[0], co_runners, threads=threads, device=device,
                   dataset=dataset, timeout_s=timeout_s) as co:
        for _ in range(max(1, rounds)):
            co.pause()  # returns once the co-runners finished their step
            alone.append(profile_model(profiled_model(model, dataset), batch_sizes, device=device,
                                       threads=threads, repeats=per, warmup=1))
            co.resume()
            busy.append(profile_model(profiled_model(model, dataset), batch_sizes, device=device,
                                      threads=threads, repeats=per, warmup=1))
    a, b = median_profile(alone), median_profile(busy)
    meta = dict(b.meta or {})
    meta["co_runners"] = co_runners
    meta["note"] = (f"measured while {co_runners} other process(es) trained {model} with {threads} "
                    f"thread(s) each; {rounds} rounds alternating with the alone profile")
    return a, replace(b, meta=meta)


def profiled_model(model: str, dataset: str | None) -> Any:
    """What ``profile_model`` is given: a zoo name (it builds it), or a user's model built
    here with the data set's input shape."""
    from stalesim.plugins import is_plugin

    if not is_plugin(model):
        return model
    from stalesim.runtime.build import model_of

    return model_of(model, dataset)


def median_profile(profs: list[Profile]) -> Profile:
    """Per-layer (and per batch size) median of the times of several profiles of one model."""
    from stalesim.workloads.profile import BatchPoint

    if len(profs) == 1:
        return profs[0]

    def layers(lists: list[Any]) -> list[Any]:
        out = []
        for ls in zip(*lists):
            out.append(replace(ls[0], forward_s=statistics.median(x.forward_s for x in ls),
                               backward_s=statistics.median(x.backward_s for x in ls),
                               update_s=statistics.median(x.update_s for x in ls)))
        return out

    def whole(ws: list[float | None]) -> float | None:
        vals = [w for w in ws if w is not None]
        return statistics.median(vals) if vals else None

    first = profs[0]
    top = layers([p.layers for p in profs])
    w = whole([p.whole_model_s for p in profs])
    points = None
    if first.by_batch_size:
        points = [BatchPoint(pts[0].batch_size, tuple(layers([list(q.layers) for q in pts])),
                             whole([q.whole_model_s for q in pts]))
                  for pts in zip(*(p.by_batch_size for p in profs))]
    ratio = sum(lp.compute_s for lp in top) / w if w else None
    return replace(first, layers=top, whole_model_s=w, sum_over_whole_ratio=ratio, by_batch_size=points,
                   repeats=sum(p.repeats or 0 for p in profs) or first.repeats)


def data_cost(model: str, dataset: str, data_dir: str | None, batch: int, part: int, repeats: int,
               dtype: str) -> float:
    """Median seconds of reading ``part`` samples of a mini-batch of ``batch`` (stage 0's F)."""
    from stalesim.runtime.build import model_of
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream

    cfg = TrainConfig(model=model, dataset=dataset, data_dir=data_dir, schedule="sequential", stages=1,
                      iterations=repeats + 2, batch_size=batch, dtype=dtype,
                      synthetic_size=max(4 * batch, 256)).check()
    stream = batch_stream(cfg, input_shape=model_of(model, dataset, seed=0).input_shape)
    read = getattr(stream, "part", None)  # as the executor's stage 0 reads (stalesim.executor.rank._input)
    times = []
    for t in range(repeats + 2):
        t0 = time.perf_counter()
        if read is not None:
            read(t, 0, part)
        else:
            stream(t)[0][:part].clone()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def _wait_ready(procs: list[Any], readies: list[Any], timeout_s: float, errors: list[Any] | None = None) -> None:
    """Wait until every co-runner has signalled ready; one that died (with the error it passed
    back, if any) or a timeout is an error."""
    deadline = time.monotonic() + timeout_s
    for i, (p, ev) in enumerate(zip(procs, readies)):
        while not ev.wait(0.1):
            if not p.is_alive():
                why = errors[i].value.decode("utf-8", "replace") if errors is not None else ""
                if why:
                    raise StalesimError(f"contention: a co-runner failed: {why}")
                raise StalesimError("contention: a co-runner process died before it started")
            if time.monotonic() > deadline:
                raise StalesimError("contention: co-runner processes did not start in time")
