"""Executor speed: pipeline speed-up on this CPU box, and parity with torch.distributed.pipelining.

``python -m benchmarks.bench_executor [--quick] [--rounds R]`` (``--quick``: batch 32, fewer
iterations, the speed-up of LeNet-5 only and ``gpipe`` only against the pipelining runtime)

1. ``stale`` on 2 ranks x 1 thread vs the same model trained on 1 rank x 1
   thread (``sequential``, S=1, same executor code path): speed-up of the
   steady-state iteration time. ResNet-20 on CIFAR-shaped synthetic data at
   batch 128 (goal >= 1.85x) and LeNet-5 at batch 128 (goal >= 1.5x).
2. ``gpipe`` and ``1f1b`` (2 stages, same partition, M micro-batches) against
   ``torch.distributed.pipelining``'s ``ScheduleGPipe`` / ``Schedule1F1B`` on the
   same stage modules, 2 ranks x 1 thread each: throughput ratio (goal >= 1.0x).

Every configuration runs in fresh processes; with ``--rounds`` > 1 the
configurations are interleaved and the best round is kept (the machine may be
shared: the load average is printed with the results). Ranks are started with
the launch code of ``stalesim run``; the pipelining baseline is started the
same way (``--pippy-worker``), so both pay the same start-up, which is not
timed anyway (only steady-state iterations are).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stalesim.atomic import write_json_atomic

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------- partition
def measured_ppv(model_name: str, batch: int, stages: int = 2, reps: int = 3) -> list[int]:
    """PPV minimising the slowest stage, from per-block forward+backward times (1 thread).

    FLOP balance (the default partition) is off on CPU: the early, wide-activation
    blocks cost more per FLOP (BatchNorm/ReLU are memory-bound), so ResNet-20's
    FLOP-balanced stage 0 is ~1.45x slower than stage 1.
    """
    import statistics

    import torch

    from stalesim.workloads.partition import min_max_partition
    from stalesim.workloads.zoo import build_model

    torch.set_num_threads(1)
    model = build_model(model_name, seed=0)
    x = torch.randn((batch, *model.input_shape))
    costs = []
    for block in model.blocks:
        xi = x.detach().requires_grad_(True)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            y = block(xi)
            y.backward(torch.ones_like(y))
            times.append(time.perf_counter() - t0)
        costs.append(statistics.median(times))
        x = y.detach()
    return list(min_max_partition(costs, stages, weight_layers=model.weight_layers).ppv)


# ------------------------------------------------------------------ executor
def _executor(model: str, schedule: str, stages: int, devices: int, iterations: int,
              batch: int, micro: int = 1, ppv: list[int] | None = None) -> dict:
    from stalesim.executor import make_job, run_local
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model=model, dataset="synthetic", schedule=schedule,
                      stages=None if ppv else stages, ppv=ppv if stages > 1 else None,
                      microbatches=micro, iterations=iterations, batch_size=batch,
                      synthetic_size=max(batch * 4, 512)).check()
    return run_local(make_job(cfg, evaluate=False), f"cpu:{devices}", timeout_s=300, threads=1)


# ------------------------------------------------- torch.distributed.pipelining
def _pippy_worker(args: argparse.Namespace) -> None:
    """One rank of the torch.distributed.pipelining baseline (started by _pippy)."""
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream
    from stalesim.workloads.partition import default_ppv, split_stages
    from stalesim.workloads.zoo import build_model

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    model = build_model(args.model, num_classes=10, seed=0)
    ppv = [int(v) for v in args.ppv.split(",")] if args.ppv else default_ppv(model, world)
    stages = split_stages(model, ppv=ppv)
    mod = stages[rank]
    cfg = TrainConfig(model=args.model, dataset="synthetic", schedule="gpipe", stages=world,
                      microbatches=args.micro, iterations=args.iterations, batch_size=args.batch,
                      synthetic_size=max(args.batch * 4, 512))
    stream = batch_stream(cfg, input_shape=model.input_shape)
    mb = args.batch // args.micro
    ins = stage_example_inputs(model, stages, mb)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"), input_args=(ins[rank],))
    cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    sched = cls(stage, args.micro, loss_fn=torch.nn.functional.cross_entropy)
    opt = torch.optim.SGD(mod.parameters(), lr=0.01, momentum=0.9)
    times = []
    for t in range(args.iterations):
        if t == args.skip:
            dist.barrier()
        t0 = time.perf_counter()
        x, y = stream(t)
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        steady = times[args.skip:]
        write_json_atomic(args.out, {"iteration_time_s": sum(steady) / len(steady)})
    dist.destroy_process_group()


def stage_example_inputs(model: Any, stages: list[Any], micro_batch: int) -> list[Any]:
    """Each stage's example input for torch's ``PipelineStage`` (one no-grad forward in eval
    mode, so no shape-inference round trip between ranks)."""
    import torch

    with torch.no_grad():
        x = torch.zeros((micro_batch, *model.input_shape))
        model.eval()
        ins = []
        for st in stages:
            ins.append(x)
            x = st(x)
        model.train()
    return ins


def _pippy(model: str, schedule: str, iterations: int, batch: int, micro: int,
           ppv: list[int] | None = None) -> dict:
    from stalesim.rendezvous import free_port

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2",
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        skip = max(1, iterations // 10)
        cmd = [sys.executable, "-m", "benchmarks.bench_executor", "--pippy-worker", "--model", model,
               "--schedule", schedule, "--iterations", str(iterations), "--batch", str(batch),
               "--micro", str(micro), "--skip", str(skip), "--out", str(out),
               "--ppv", ",".join(map(str, ppv or []))]
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), cwd=ROOT)
                 for r in range(2)]
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise RuntimeError(f"torch.distributed.pipelining baseline failed: exit codes {codes}")
        return json.loads(out.read_text())


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_executor")
    p.add_argument("--quick", action="store_true",
                   help="batch 32, fewer iterations, lenet5's speed-up, gpipe (a smoke run)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", choices=("speedup", "pippy"), default=None)
    p.add_argument("--pippy-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="resnet20", help=argparse.SUPPRESS)
    p.add_argument("--schedule", default="gpipe", help=argparse.SUPPRESS)
    p.add_argument("--iterations", type=int, default=20, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=128, help=argparse.SUPPRESS)
    p.add_argument("--micro", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--skip", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ppv", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.pippy_worker:
        _pippy_worker(args)
        return
    q = args.quick
    it_res, it_lenet = (8, 40) if q else (30, 150)
    print(f"load average before: {os.getloadavg()[0]:.2f} (2-core box; > 2 means someone else is running)")
    best: dict[str, float] = {}
    speedup_models = (("lenet5", it_lenet),) if q else (("resnet20", it_res), ("lenet5", it_lenet))
    pippy_schedules = ("gpipe",) if q else ("gpipe", "1f1b")
    need = {m for m, _ in speedup_models if args.only in (None, "speedup")} | (
        {"resnet20"} if args.only in (None, "pippy") else set())
    B = 32 if q else 128  # the goals are stated at batch 128
    ppvs = {m: measured_ppv(m, B) for m in sorted(need)}
    print(f"measured-time partitions (PPV): {ppvs}")

    def keep(key: str, value: float) -> None:
        best[key] = min(best.get(key, float("inf")), value)

    for r in range(args.rounds):
        if args.only in (None, "speedup"):
            for model, iters in speedup_models:
                one = _executor(model, "sequential", 1, 1, iters, B)
                two = _executor(model, "stale", 2, 2, iters, B, ppv=ppvs[model])
                keep(f"{model}/1rank", one["iteration_time_s"])
                keep(f"{model}/stale2", two["iteration_time_s"])
                print(f"round {r}: {model}: 1 rank {one['iteration_time_s'] * 1e3:.1f} ms, stale 2 ranks "
                      f"{two['iteration_time_s'] * 1e3:.1f} ms (util {two['utilization']})", flush=True)
        if args.only in (None, "pippy"):
            M = 4
            for sched in pippy_schedules:
                ours = _executor("resnet20", sched, 2, 2, it_res, B, M, ppv=ppvs["resnet20"])
                theirs = _pippy("resnet20", sched, it_res, B, M, ppv=ppvs["resnet20"])
                keep(f"{sched}/ours", ours["iteration_time_s"])
                keep(f"{sched}/torch", theirs["iteration_time_s"])
                print(f"round {r}: resnet20 {sched} M={M}: ours {ours['iteration_time_s'] * 1e3:.1f} ms, "
                      f"torch.distributed.pipelining {theirs['iteration_time_s'] * 1e3:.1f} ms", flush=True)
    print()
    print(f"{'measure':44s} {'value':>10s} {'goal':>8s}")
    for model, goal in (("resnet20", 1.85), ("lenet5", 1.5)):
        if f"{model}/1rank" in best:
            sp = best[f"{model}/1rank"] / best[f"{model}/stale2"]
            print(f"{'stale speed-up ' + model + f' b{B} (2 ranks / 1 rank)':44s} {sp:>9.2f}x {goal:>7.2f}x")
    for sched in ("gpipe", "1f1b"):
        if f"{sched}/ours" in best:
            ratio = best[f"{sched}/torch"] / best[f"{sched}/ours"]
            print(f"{sched + ' throughput vs torch pipelining (resnet20)':44s} {ratio:>9.2f}x {1.0:>7.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
