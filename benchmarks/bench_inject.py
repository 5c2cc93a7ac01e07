"""Cost of StalePipeline: a user's char-GPT loop wrapped vs the same loop plain.

Two copies of the model (same weights, same batches) train side by side, alternating a
chunk of steps each per round; the figure is the median over rounds of the wrapped loop's
seconds per step over the plain loop's (goal <= 1.10x on the char-GPT at batch 32). What the
wrapper adds per step: the forward pre/post hooks, pointing each stale stage's parameters at
their version, a saved-tensor hook per saved tensor (a storage-address lookup), the unpack of
each saved weight as a view of its version, and the copy of the weights a later batch reads
(one weight copy per stashed version; for ``stale`` every stage but the last). The memory beyond
plain training is printed as the peak of those copies. ``--workers P`` runs ``pipe-sgd``'s
(or ``dp``'s) P data-parallel workers in turn, each on batch / P rows, against the plain loop
accumulating the same P backwards; the wrapper then adds the all-reduce on ``.grad`` (a packed
copy of each worker's gradient, a hook per parameter). CUDA rows are printed when a GPU is
visible. Run::

    python -m benchmarks.bench_inject [--quick] [--schedule stale --schedule pipedream]
    python -m benchmarks.bench_inject --schedule pipe-sgd --stages 1 --workers 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from stalesim.inject import StalePipeline
from stalesim.runtime.build import model_of
from stalesim.workloads.partition import split_stages

MODEL = "gpt-char:n_layer=6,n_embd=64,n_head=4,block_size=64"
QUICK_MODEL = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
GOAL = 1.10


class Loop:
    """One training loop (optionally wrapped), stepped a chunk at a time."""

    def __init__(self, name: str, device: str, schedule: str | None, stages: int, steps: int,
                 workers: int = 1) -> None:
        self.model = model_of(name, seed=0).to(device)
        self.model.train()
        self.pipe = None
        if schedule is not None:
            cut = [list(s) for s in split_stages(self.model, stages=stages)]
            self.pipe = StalePipeline(self.model, schedule, steps=steps, split=cut, workers=workers)
        self.workers = workers
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        if self.pipe is not None:
            self.pipe.attach(self.opt)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for xr, yr in zip(x.chunk(self.workers), y.chunk(self.workers)):  # each worker's rows in turn
            logits = self.model(xr)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), yr.flatten())
            loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(name: str, device: str, schedule: str, *, stages: int, batch: int, rounds: int, chunk: int,
            workers: int = 1) -> tuple[float, float, float, int]:
    """(plain s/step, wrapped s/step, median ratio, stash peak bytes)."""
    steps = rounds * chunk + 2
    plain = Loop(name, device, None, stages, steps, workers)
    wrapped = Loop(name, device, schedule, stages, steps, workers)
    block = plain.model.input_shape[0]
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(0, 128, (batch, block + 1), generator=g) for _ in range(steps)]
    xs = [(d[:, :-1].to(device), d[:, 1:].to(device)) for d in data]
    for loop in (plain, wrapped):  # warm-up step, not timed
        loop.step(*xs[0])
    times: dict[str, list[float]] = {"plain": [], "wrapped": []}
    i = 1
    for _ in range(rounds):
        for key, loop in (("plain", plain), ("wrapped", wrapped)):
            _sync(device)
            t0 = time.perf_counter()
            for k in range(chunk):
                loop.step(*xs[i + k])
            _sync(device)
            times[key].append((time.perf_counter() - t0) / chunk)
        i += chunk
    ratios = [w / p for p, w in zip(times["plain"], times["wrapped"])]
    assert wrapped.pipe is not None
    return (statistics.median(times["plain"]), statistics.median(times["wrapped"]), statistics.median(ratios),
            wrapped.pipe.stash_peak_bytes)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_inject")
    ap.add_argument("--schedule", action="append", default=None, help="default: stale and pipedream")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--workers", type=int, default=1, help="data-parallel workers (dp, pipe-sgd)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="a tiny GPT, 2 rounds of 1 step (smoke test)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.model, args.rounds, args.chunk, args.batch_size = QUICK_MODEL, 2, 1, 8
    schedules = args.schedule or ["stale", "pipedream"]
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load before {os.getloadavg()[0]:.2f}; "
          f"{args.model}, batch {args.batch_size}, S = {args.stages}, P = {args.workers}, {args.rounds} rounds x "
          f"{args.chunk} steps")
    print("| device | schedule | plain ms/step | wrapped ms/step | wrapped / plain (median) | goal "
          "| extra weights MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for dev in devices:
        for sched in schedules:
            p, w, r, stash = measure(args.model, dev, sched, stages=args.stages, batch=args.batch_size,
                                     rounds=args.rounds, chunk=args.chunk, workers=args.workers)
            print(f"| {dev} | {sched} | {p * 1e3:.1f} | {w * 1e3:.1f} | {r:.3f}x | <= {GOAL:.2f}x | "
                  f"{stash / 2**20:.2f} |")


if __name__ == "__main__":
    main()
