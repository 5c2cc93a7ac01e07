"""Study throughput of batched emulation: K runs at once vs a loop of K single runs.

``python -m benchmarks.bench_batched [--quick] [--runs K] [--rounds R] [--threads T]
[--workload NAME ...] [--device cpu|cuda]`` (``--quick``: 2 rounds of 1 step, K = 4, ``lenet5`` only
unless ``--workload`` names others).

Throughput = runs x training steps per second. Contenders per workload, in one process:
**loop**: K single-run emulators (seeds 0..K-1), each advanced by a chunk of steps in
turn (what ``stalesim study`` without ``--batched`` does, one run after another);
**batched**: one :class:`~stalesim.emulator.batched.BatchedEmulator` of the same K runs
advanced by the same chunk. The two alternate chunk by chunk, round after round, so a
burst of foreign load hits both alike; the report is the median over rounds of each
contender's throughput, with its min-max spread, and the ratio of the medians. Every
run trains on real data when ``$STALESIM_DATA`` has it (synthetic otherwise, said in the
table). Workloads:

* ``lenet5``: LeNet-5 / MNIST, batch 128, ``stale`` S = 4, SGD momentum;
* ``gpt-small``: the study's char-GPT (``gpt-char:n_layer=6,n_embd=64,n_head=4,block_size=64``)
  on Shakespeare, batch 16, ``2bw`` S = 4, M = 4, AdamW;
* ``gpt-study``: the char-GPT of the docs/RESULTS.md staleness study
  (``gpt-char:n_layer=6,n_embd=32,n_head=2,block_size=32``), batch 8, ``2bw`` S = 4, M = 8, AdamW;
* ``gpt-char``: the zoo's default char-GPT (4 x 128, 128-character windows), batch 32,
  ``2bw`` S = 4, M = 4, AdamW.

With CUDA available (``--device cuda``, the default when it is), the same table is
printed for the GPU. Run it under ``/work/shared/tools/quiet run``: it is a measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from typing import Any

WORKLOADS: dict[str, dict[str, Any]] = {
    "lenet5": {"model": "lenet5", "dataset": "mnist", "batch_size": 128, "schedule": "stale", "stages": 4,
               "optimizer": "sgd", "lr": 0.01},
    "gpt-small": {"model": "gpt-char:n_layer=6,n_embd=64,n_head=4,block_size=64", "dataset": "shakespeare",
                  "batch_size": 16, "schedule": "2bw", "stages": 4, "microbatches": 4, "optimizer": "adamw",
                  "lr": 3e-3},
    "gpt-study": {"model": "gpt-char:n_layer=6,n_embd=32,n_head=2,block_size=32", "dataset": "shakespeare",
                  "batch_size": 8, "schedule": "2bw", "stages": 4, "microbatches": 8, "optimizer": "adamw",
                  "lr": 3e-3},
    "gpt-char": {"model": "gpt-char", "dataset": "shakespeare", "batch_size": 32, "schedule": "2bw",
                 "stages": 4, "microbatches": 4, "optimizer": "adamw", "lr": 3e-4},
}


def _driver(emu: Any) -> Any:
    """advance(a, b): run the emulator's replay up to the first forward of batch b."""
    from stalesim.schedule import Kind

    emu._metrics_fh, emu._metrics_fhs, emu._t0 = None, None, time.perf_counter()
    steps = emu.steps
    first: dict[int, int] = {}
    for i, a in enumerate(steps):
        if a.kind is Kind.F and a.stage == 0 and a.worker == 0:
            first.setdefault(a.batch, i)
    pos = {"i": 0}

    def advance(b: int) -> None:
        end = first.get(b, len(steps))
        for k in range(pos["i"], end):
            emu._step(steps[k])
        pos["i"] = end

    return advance


def measure(name: str, *, runs: int, rounds: int, chunk: int, device: str, data_dir: str | None) -> dict:
    import torch

    from stalesim.emulator.batched import BatchedEmulator
    from stalesim.emulator.replay import Emulator
    from stalesim.runtime.config import TrainConfig

    spec = dict(WORKLOADS[name])
    have_data = data_dir is not None and os.path.isdir(data_dir)
    if not have_data:
        spec["dataset"] = "synthetic"
    iters = chunk * (rounds + 2) + 4
    base = TrainConfig(iterations=iters, device=device, data_dir=data_dir, momentum=0.9, **spec).check()
    cfgs = [replace(base, seed=k).check() for k in range(runs)]
    singles = [_driver(Emulator(c, progress=False)) for c in cfgs]
    batched = _driver(BatchedEmulator(cfgs, progress=False))

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    # warm-up chunk (allocator, kernels, first-call paths)
    for s in singles:
        s(chunk)
    batched(chunk)
    sync()
    loop_rates, batch_rates = [], []
    for r in range(rounds):
        b = chunk * (r + 2)
        t0 = time.perf_counter()
        for s in singles:
            s(b)
        sync()
        t1 = time.perf_counter()
        batched(b)
        sync()
        t2 = time.perf_counter()
        loop_rates.append(runs * chunk / (t1 - t0))
        batch_rates.append(runs * chunk / (t2 - t1))
    lm, bm = statistics.median(loop_rates), statistics.median(batch_rates)
    return {"workload": name, "dataset": base.dataset, "runs": runs, "loop": lm, "loop_min": min(loop_rates),
            "loop_max": max(loop_rates), "batched": bm, "batched_min": min(batch_rates),
            "batched_max": max(batch_rates), "speedup": bm / lm}


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_batched")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--chunk", type=int, default=3, help="training steps per contender per round")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS), default=None)
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available, and cpu)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1 step, K = 4, lenet5 (smoke test)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.rounds, args.chunk, args.runs = 2, 1, 4
        args.workload = args.workload or ["lenet5"]
    devices = [args.device] if args.device else (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    data_dir = os.environ.get("STALESIM_DATA")
    names = args.workload or list(WORKLOADS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load before "
          f"{os.getloadavg()[0]:.2f}; K = {args.runs} runs, {args.rounds} rounds x {args.chunk} steps")
    print("| device | workload | data | loop of K runs (runs x steps/s) | batched K | speed-up |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for dev in devices:
        for name in names:
            r = measure(name, runs=args.runs, rounds=args.rounds, chunk=args.chunk, device=dev, data_dir=data_dir)
            print(f"| {dev} | {name} | {r['dataset']} | {r['loop']:.1f} ({r['loop_min']:.1f} - {r['loop_max']:.1f}) "
                  f"| {r['batched']:.1f} ({r['batched_min']:.1f} - {r['batched_max']:.1f}) | "
                  f"**{r['speedup']:.2f}x** |", flush=True)
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
