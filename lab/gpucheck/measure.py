"""Steps that time things on one device: the profiler, the emulator, the batched emulator."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from lab.gpucheck.env import precision_flags
from lab.gpucheck.jobs import dataset_for
from lab.gpucheck.plan import (
    BATCHED_K,
    BATCHED_LOSS_REL_TOL,
    COMPUTE_BOUND_SHARE,
    EVENT_WALL_REL_TOL,
    PROFILE_REL_TOL,
)
from lab.gpucheck.report import Context, Outcome

# the dry mode's models: the same code paths, a few milliseconds a step on a CPU
TINY_GPT = "gpt-char:n_layer=1,n_embd=16,n_head=2,block_size=8"
STUDY_GPT = "gpt-char:n_layer=6,n_embd=32,n_head=2,block_size=32"  # docs/RESULTS.md's staleness study


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _losses(by_batch: dict[int, float]) -> list[float]:
    """The emulator's losses in batch order (its state keeps them by batch)."""
    return [by_batch[t] for t in sorted(by_batch)]


def whole_step_times(model_name: str, batch: int, device: str, steps: int, warmup: int = 3) -> dict[str, float]:
    """One whole training step (forward, loss, backward, SGD-momentum step with lr 0, as the
    profiler's whole-model step) timed ``steps`` times in isolation (the device synchronized
    before and after each, as the profiler's events see it), the medians of: the host wall
    clock (``wall_s``), CUDA events around the step (``events_s``), and the mean of the same
    steps back to back (``pipelined_s``: the host launching ahead of the device, as training
    runs); on CUDA also the share of the step the device spends in kernels (``kernel_share``,
    from torch.profiler: below ~0.8 the step is launch-bound)."""
    import statistics

    import torch
    import torch.nn.functional as F

    from stalesim.workloads.zoo import build_model

    net = build_model(model_name, seed=0).to(device).train()
    x, y = net.random_batch(batch, torch.Generator().manual_seed(0), torch.float32)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(list(net.parameters()), lr=0.0, momentum=0.9)
    cuda = device.startswith("cuda")

    def step() -> None:
        out = net(x)
        F.cross_entropy(out.float().flatten(0, -2), y.flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    wall: list[float] = []
    events: list[float] = []
    for _ in range(steps):
        _sync(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        step()
        if cuda:
            end.record()
        _sync(device)
        wall.append(time.perf_counter() - t0)
        if cuda:
            events.append(start.elapsed_time(end) / 1000.0)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    out = {"wall_s": statistics.median(wall), "pipelined_s": (time.perf_counter() - t0) / steps,
           "events_s": statistics.median(events) if events else float("nan")}
    if cuda:
        from torch.profiler import ProfilerActivity, profile

        n = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            _sync(device)
        kernels_us = sum(e.device_time_total for e in prof.key_averages()
                         if e.device_type == torch.autograd.DeviceType.CUDA)
        out["kernel_share"] = kernels_us / 1e6 / n / out["pipelined_s"]
    return out


def profile_step(ctx: Context) -> Outcome:
    """``profile_model`` on the device (CUDA events there), then the same whole step timed in
    isolation on the host clock. Two checks: the timer (the event-timed isolated step vs its
    host wall clock, within EVENT_WALL_REL_TOL), and the per-block sum vs the whole step
    (within PROFILE_REL_TOL where the step is compute-bound; reported where it is
    launch-bound, where per-block host work is the step). On the CPU (dry) both are
    perf_counter on a shared machine: reported, not enforced."""
    from stalesim.workloads.profiler import profile_model

    o = Outcome(numbers={"precision": precision_flags(), "device": ctx.device})
    work = ([("resnet20", "resnet8", 2), ("gpt-char", TINY_GPT, 2)] if ctx.dry else
            [("resnet20", "resnet20", 128), ("gpt-char", "gpt-char", 32), ("resnet20-b1024", "resnet20", 1024)])
    repeats, warm = (1, 0) if ctx.dry else (20, 5)
    for key, model, batch in work:
        prof = profile_model(model, batch, device=ctx.device, repeats=repeats, warmup=warm)
        layer_sum = sum(lp.compute_s for lp in prof.layers)
        t = whole_step_times(model, batch, ctx.device, steps=2 if ctx.dry else 30, warmup=1 if ctx.dry else 3)
        wall = t["wall_s"]
        events = t["events_s"] if not ctx.dry else prof.whole_model_s or float("nan")
        bound = t.get("kernel_share", 0.0) >= COMPUTE_BOUND_SHARE
        o.numbers[key] = {"model": model, "batch": batch, "timer": prof.meta.get("timer"), "blocks": len(prof.layers),
                          "layer_sum_s": layer_sum, "profile_whole_s": prof.whole_model_s, **t,
                          "compute_bound": bound, "layer_sum_over_wall": layer_sum / wall,
                          "events_over_wall": events / wall}
        o.check(f"{key}: timer, whole step: CUDA events vs host wall clock",
                abs(events / wall - 1) <= EVENT_WALL_REL_TOL, events / wall, f"1 +- {EVENT_WALL_REL_TOL}",
                enforced=not ctx.dry)
        o.check(f"{key}: per-block sum vs whole step ({'compute' if bound else 'launch'}-bound, kernels "
                f"{t.get('kernel_share', float('nan')):.2f} of the step)",
                abs(layer_sum / wall - 1) <= PROFILE_REL_TOL, layer_sum / wall, f"1 +- {PROFILE_REL_TOL}",
                enforced=bound and not ctx.dry)
        o.check(f"{key}: timer", prof.meta.get("timer") == ("perf_counter" if ctx.dry else "cuda-events"),
                prof.meta.get("timer"))
    if not ctx.dry:
        o.check("a compute-bound step was measured", any(o.numbers[k]["compute_bound"] for k, _, _ in work),
                [round(o.numbers[k].get("kernel_share", 0), 3) for k, _, _ in work], f">= {COMPUTE_BOUND_SHARE}")
    return o


def _speed_configs(ctx: Context) -> dict[str, Any]:
    from stalesim.runtime.config import TrainConfig

    if ctx.dry:
        return {
            "resnet20": TrainConfig(model="resnet8", dataset="synthetic", schedule="stale", stages=2, iterations=3,
                                    batch_size=8, synthetic_size=32, device="cpu"),
            "gpt-char": TrainConfig(model=TINY_GPT, dataset="synthetic", schedule="2bw", stages=2, microbatches=2,
                                    optimizer="adamw", lr=3e-4, batch_size=4, iterations=3, synthetic_size=32,
                                    device="cpu"),
        }
    cifar, cdir = dataset_for("cifar10", ctx.data_dir)
    text, tdir = dataset_for("shakespeare", ctx.data_dir)
    return {
        "resnet20": TrainConfig(model="resnet20", dataset=cifar, data_dir=cdir, schedule="stale", stages=4,
                                iterations=60, batch_size=128, synthetic_size=2048, device=ctx.device),
        "gpt-char": TrainConfig(model="gpt-char", dataset=text, data_dir=tdir, schedule="2bw", stages=4,
                                microbatches=4, optimizer="adamw", lr=3e-4, batch_size=32, iterations=40,
                                device=ctx.device),
    }


def emulator_speed_step(ctx: Context) -> Outcome:
    """Emulator training steps per second (replay only: data loading and model building are
    outside the clock), after a short warm-up run in the same process (CUDA/cuDNN handles)."""
    from stalesim.emulator.replay import Emulator

    o = Outcome(numbers={"device": ctx.device})
    for key, cfg in _speed_configs(ctx).items():
        cfg = cfg.check()
        Emulator(replace(cfg, iterations=2).check(), progress=False).replay()  # warm-up
        emu = Emulator(cfg, progress=False)
        _sync(ctx.device)
        secs = emu.replay()
        _sync(ctx.device)
        losses = _losses(emu.state.losses)
        finite = bool(losses) and all(x == x and abs(x) != float("inf") for x in losses)
        o.numbers[key] = {"model": cfg.model, "dataset": cfg.dataset, "schedule": cfg.schedule,
                          "stages": cfg.num_stages, "batch": cfg.batch_size, "iterations": cfg.iterations,
                          "steps_per_s": cfg.iterations / secs, "last_loss": losses[-1] if losses else None}
        o.check(f"{key}: finite losses", finite, losses[-1] if losses else None)
    return o


def batched_step(ctx: Context) -> Outcome:
    """K runs (seeds 0..K-1) as one batched emulation vs the same K runs one after another:
    steps/s of each, their ratio (the point of batching: > 1 on a GPU), and equal losses."""
    import torch

    from stalesim.emulator.batched import BatchedEmulator
    from stalesim.emulator.replay import Emulator
    from stalesim.runtime.config import TrainConfig

    K = 2 if ctx.dry else BATCHED_K
    text, tdir = dataset_for("shakespeare", None if ctx.dry else ctx.data_dir)
    base = TrainConfig(model=TINY_GPT if ctx.dry else STUDY_GPT, dataset=text, data_dir=tdir, schedule="2bw",
                       stages=2 if ctx.dry else 4, microbatches=2 if ctx.dry else 8, batch_size=8,
                       optimizer="adamw", lr=3e-3, iterations=3 if ctx.dry else 30, synthetic_size=64,
                       device=ctx.device).check()
    cfgs = [replace(base, seed=k).check() for k in range(K)]
    Emulator(replace(base, iterations=2).check(), progress=False).replay()  # warm-up
    singles = [Emulator(c, progress=False) for c in cfgs]
    batched = BatchedEmulator(cfgs, progress=False)
    _sync(ctx.device)
    t0 = time.perf_counter()
    for emu in singles:
        emu.replay()
    _sync(ctx.device)
    t1 = time.perf_counter()
    batched.replay()
    _sync(ctx.device)
    t2 = time.perf_counter()
    steps = K * int(base.iterations or 0)
    loop_rate, batch_rate = steps / (t1 - t0), steps / (t2 - t1)
    by_batch: dict[int, list[float]] = batched.state.losses  # a loss per run
    got = torch.tensor([[by_batch[t][k] for t in sorted(by_batch)] for k in range(K)], dtype=torch.float64)
    want = torch.tensor([_losses(e.state.losses) for e in singles], dtype=torch.float64)
    rel = float(((got - want).abs() / want.abs().clamp_min(1e-12)).max()) if got.shape == want.shape else float("inf")
    o = Outcome(numbers={"K": K, "model": base.model, "dataset": base.dataset, "schedule": base.schedule,
                         "iterations": base.iterations, "loop_steps_per_s": loop_rate,
                         "batched_steps_per_s": batch_rate, "speedup": batch_rate / loop_rate,
                         "max_rel_loss_diff": rel})
    o.check("batched losses == single runs' losses", rel <= BATCHED_LOSS_REL_TOL, rel, BATCHED_LOSS_REL_TOL)
    o.check("batched faster than the loop", batch_rate > loop_rate, batch_rate / loop_rate, "> 1",
            enforced=not ctx.dry)
    return o
