"""Steps that time things on one device: the profiler, the emulator, the batched emulator."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from stalesim.gpucheck.env import precision_flags
from stalesim.gpucheck.jobs import dataset_for
from stalesim.gpucheck.plan import BATCHED_K, BATCHED_LOSS_REL_TOL, EVENT_WALL_REL_TOL, PROFILE_REL_TOL
from stalesim.gpucheck.report import Context, Outcome

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


def wall_step_s(model_name: str, batch: int, device: str, steps: int, warmup: int = 3) -> float:
    """Host wall clock of one whole training step (forward, loss, backward, SGD-momentum step with
    lr 0, as the profiler's whole-model step), the mean over ``steps`` after ``warmup``, the device
    synchronized at both ends: the reference the CUDA-event timings are judged against."""
    import torch
    import torch.nn.functional as F

    from stalesim.workloads.zoo import build_model

    net = build_model(model_name, seed=0).to(device).train()
    gen = torch.Generator().manual_seed(0)
    x = net.random_input(batch, gen)
    x = x.to(device)
    with torch.no_grad():
        ncls = net(x[:1]).shape[-1]
    y = (torch.randint(0, 10, (batch, *net.label_shape), generator=gen) % ncls).to(device)
    opt = torch.optim.SGD(list(net.parameters()), lr=0.0, momentum=0.9)

    def step() -> None:
        out = net(x)
        F.cross_entropy(out.float().flatten(0, -2), y.flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


def profile_step(ctx: Context) -> Outcome:
    """``profile_model`` on the device (CUDA events there), then the whole step on the host clock:
    the per-block sum must agree with it within PROFILE_REL_TOL, and the event-timed whole step
    with the wall-clock one within EVENT_WALL_REL_TOL (the same kernels). On the CPU (dry) both
    are perf_counter on a shared machine: reported, not enforced."""
    from stalesim.workloads.profiler import profile_model

    o = Outcome(numbers={"precision": precision_flags(), "device": ctx.device})
    work = ([("resnet20", "resnet8", 2), ("gpt-char", TINY_GPT, 2)] if ctx.dry else
            [("resnet20", "resnet20", 128), ("gpt-char", "gpt-char", 32)])
    repeats, warm = (1, 0) if ctx.dry else (20, 5)
    for key, model, batch in work:
        prof = profile_model(model, batch, device=ctx.device, repeats=repeats, warmup=warm)
        layer_sum = sum(lp.compute_s for lp in prof.layers)
        wall = wall_step_s(model, batch, ctx.device, steps=2 if ctx.dry else 30, warmup=1 if ctx.dry else 3)
        whole = prof.whole_model_s or float("nan")
        o.numbers[key] = {"model": model, "batch": batch, "timer": prof.meta.get("timer"), "blocks": len(prof.layers),
                          "layer_sum_s": layer_sum, "whole_events_s": whole, "wall_step_s": wall,
                          "layer_sum_over_wall": layer_sum / wall, "whole_events_over_wall": whole / wall}
        o.check(f"{key}: per-block sum vs wall clock", abs(layer_sum / wall - 1) <= PROFILE_REL_TOL,
                layer_sum / wall, f"1 +- {PROFILE_REL_TOL}", enforced=not ctx.dry)
        o.check(f"{key}: whole step, events vs wall clock", abs(whole / wall - 1) <= EVENT_WALL_REL_TOL,
                whole / wall, f"1 +- {EVENT_WALL_REL_TOL}", enforced=not ctx.dry)
        o.check(f"{key}: timer", prof.meta.get("timer") == ("perf_counter" if ctx.dry else "cuda-events"),
                prof.meta.get("timer"))
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
    by_batch: dict[int, list[float]] = batched.state.losses  # type: ignore[assignment]  # a loss per run
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
