"""Our executor vs torch.distributed.pipelining's runtime on the virtual-stage and
zero-bubble schedules both have, same model, same partition, same micro-batching.

``python -m benchmarks.bench_pipelining [--quick] [--rounds R] [--schedules a,b]`` (``--quick``: one
round of ``interleaved-1f1b``, 6 iterations, unless the options say otherwise)

Two ranks x 1 thread each on gloo (CPU), S = 4 stages (2 per rank), ResNet-20 on
CIFAR-shaped synthetic data, batch 64 in M = 4 micro-batches, the PPV that
balances the measured per-block times over the 4 stages. For each schedule:

* ours: ``stalesim run`` machinery (``stalesim.executor.run_local``) on ``interleaved-1f1b``
  / ``zb-v`` / ``dualpipev``, steady-state iteration time (the executor's own
  measurement window);
* torch: ``ScheduleInterleaved1F1B`` / ``ScheduleZBVZeroBubble`` /
  ``ScheduleDualPipeV`` with ``PipelineStage`` objects of the same stage modules
  (loop or V placement), ``step()`` + SGD step per iteration, the mean of the
  iterations after the first tenth.

Both sides are started the same way (fresh processes; start-up is not timed),
back to back, the order alternating between rounds. Printed: per-round times,
then per schedule the throughput ratio torch time / our time (goal >= 1.0x) as
the median over rounds with the spread (min..max). The load
average is printed before and after (a shared 2-core machine: run it under
``/work/shared/tools/quiet run``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_executor import measured_ppv, stage_example_inputs

ROOT = Path(__file__).resolve().parent.parent
# ours -> (torch class, placement)
PAIRS = {"interleaved-1f1b": ("ScheduleInterleaved1F1B", "loop"),
         "zb-v": ("ScheduleZBVZeroBubble", "v"),
         "dualpipev": ("ScheduleDualPipeV", "v")}
S, RANKS = 4, 2


def ours(model: str, schedule: str, iterations: int, batch: int, micro: int, ppv: list[int]) -> float:
    from stalesim.executor import make_job, run_local
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model=model, dataset="synthetic", schedule=schedule, ppv=ppv,
                      microbatches=micro, iterations=iterations, batch_size=batch,
                      synthetic_size=max(batch * 4, 256)).check()
    res = run_local(make_job(cfg, evaluate=False), f"cpu:{RANKS}", timeout_s=600, threads=1)
    return float(res["iteration_time_s"])


def _torch_worker(args: argparse.Namespace) -> None:
    """One rank of the torch.distributed.pipelining baseline (started by :func:`theirs`)."""
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, schedules

    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream
    from stalesim.schedule.placement import chunks_of
    from stalesim.workloads.partition import split_stages
    from stalesim.workloads.zoo import build_model

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    model = build_model(args.model, num_classes=10, seed=0)
    ppv = [int(v) for v in args.ppv.split(",")]
    mods = split_stages(model, ppv=ppv)
    n_stages = len(mods)
    cfg = TrainConfig(model=args.model, dataset="synthetic", schedule="gpipe", ppv=ppv,
                      microbatches=args.micro, iterations=args.iterations, batch_size=args.batch,
                      synthetic_size=max(args.batch * 4, 256))
    stream = batch_stream(cfg, input_shape=model.input_shape)
    mb = args.batch // args.micro
    ins = stage_example_inputs(model, mods, mb)
    mine = chunks_of(args.placement, n_stages, n_stages // world)[rank]
    stages = [PipelineStage(mods[s], s, n_stages, torch.device("cpu"), input_args=(ins[s],))
              for s in mine]
    cls = getattr(schedules, args.torch_class)
    sched = cls(stages, args.micro, loss_fn=torch.nn.functional.cross_entropy)
    params = [p for s in mine for p in mods[s].parameters()]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    times = []
    for t in range(args.iterations):
        if t == args.skip:
            dist.barrier()
        t0 = time.perf_counter()
        x, y = stream(t)
        kw = {}
        if n_stages - 1 in mine:
            kw = {"target": y, "losses": []}
        if 0 in mine:
            sched.step(x, **kw)
        else:
            sched.step(**kw)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        steady = times[args.skip:]
        Path(args.out).write_text(json.dumps({"iteration_time_s": sum(steady) / len(steady)}))
    dist.destroy_process_group()


def theirs(model: str, schedule: str, iterations: int, batch: int, micro: int, ppv: list[int]) -> float:
    from stalesim.rendezvous import free_port

    cls, placement = PAIRS[schedule]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(RANKS), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        skip = max(1, iterations // 10)
        cmd = [sys.executable, "-m", "benchmarks.bench_pipelining", "--torch-worker", "--model", model,
               "--torch-class", cls, "--placement", placement, "--iterations", str(iterations),
               "--batch", str(batch), "--micro", str(micro), "--skip", str(skip), "--out", str(out),
               "--ppv", ",".join(map(str, ppv))]
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), cwd=ROOT)
                 for r in range(RANKS)]
        codes = [p.wait(timeout=1800) for p in procs]
        if any(codes):
            raise RuntimeError(f"torch.distributed.pipelining {cls} failed: exit codes {codes}")
        return float(json.loads(out.read_text())["iteration_time_s"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_pipelining")
    p.add_argument("--quick", action="store_true", help="one round of one schedule, 6 iterations (a smoke run)")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (--quick: 1)")
    p.add_argument("--schedules", default=None, help=f"default {','.join(PAIRS)} (--quick: the first)")
    p.add_argument("--model", default="resnet20")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--torch-class", default="", help=argparse.SUPPRESS)
    p.add_argument("--placement", default="loop", help=argparse.SUPPRESS)
    p.add_argument("--skip", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ppv", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.torch_worker:
        _torch_worker(args)
        return
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.schedules = args.schedules or (next(iter(PAIRS)) if args.quick else ",".join(PAIRS))
    iters = args.iterations or (6 if args.quick else 16)
    names = [n.strip() for n in args.schedules.split(",") if n.strip()]
    for n in names:
        if n not in PAIRS:
            raise SystemExit(f"--schedules: {n!r} has no torch counterpart here ({', '.join(PAIRS)})")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    ppv = measured_ppv(args.model, args.batch // args.micro, S)
    print(f"{args.model}, batch {args.batch}, M={args.micro}, S={S} on {RANKS} ranks x 1 thread, "
          f"PPV {ppv}, {iters} iterations, {args.rounds} round(s)")
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names:
            if r % 2:  # alternate who runs first, so a burst of load does not favour one side
                b = theirs(args.model, n, iters, args.batch, args.micro, ppv)
                a = ours(args.model, n, iters, args.batch, args.micro, ppv)
            else:
                a = ours(args.model, n, iters, args.batch, args.micro, ppv)
                b = theirs(args.model, n, iters, args.batch, args.micro, ppv)
            ratios[n].append(b / a)
            print(f"round {r}: {n:17s} ours {a * 1e3:8.1f} ms  torch {PAIRS[n][0]} {b * 1e3:8.1f} ms  "
                  f"ratio {b / a:.3f}", flush=True)
    print()
    print(f"{'throughput, ours / torch.distributed.pipelining':52s} {'median':>7s} {'min..max':>13s} "
          f"{'goal':>6s}")
    for n in names:
        v = ratios[n]
        print(f"{n + ' vs ' + PAIRS[n][0]:52s} {statistics.median(v):>6.3f}x "
              f"{min(v):>5.3f}..{max(v):<6.3f} {'>= 1.0x':>7s}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
