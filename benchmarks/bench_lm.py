"""Training-step time of the small character GPT on this CPU (and the emulator's cost on it).

``python -m benchmarks.bench_lm [--quick] [--batch-size B] [--threads T] [--rounds R]``.

Contenders, all on the default ``gpt-char`` (4 layers x 128 wide, 4 heads, 128-character
windows, 0.84 M parameters) with AdamW, on Shakespeare (``$STALESIM_DATA``; synthetic
text without it): a plain PyTorch training loop (forward, next-character loss,
backward, AdamW step), the same loop accumulating gradients over 4 micro-batches
(what 2BW's M = 4 costs without any pipelining), the emulator running ``sequential``
(one stage) and ``2bw`` with S = 4, M = 4. As in ``bench_emulator``, the contenders live in one process and
run in interleaved chunks of a few steps, round after round, so that a burst of
foreign load hits all alike; the report is the median time per training step over
chunks, with its min-max spread. Run it under ``/work/shared/tools/quiet run`` (or on a
quiet machine): it is a measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

CONTENDERS = ("plain", "plain M=4", "sequential", "2bw S=4")


def _setup(name: str, batch: int, iters: int, dataset: str, data_dir: str | None):
    import torch

    from stalesim.runtime.config import TrainConfig

    if name.startswith("plain"):
        from stalesim.runtime.data import batch_stream
        from stalesim.runtime.tasks import loss_fn
        from stalesim.workloads.zoo import build_model

        cfg = TrainConfig(model="gpt-char", dataset=dataset, iterations=iters, batch_size=batch,
                          data_dir=data_dir, optimizer="adamw", lr=3e-4).check()
        m = build_model("gpt-char", seed=0).train()
        stream = batch_stream(cfg, input_shape=m.input_shape)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
        lf = loss_fn("lm")
        M = 4 if name == "plain M=4" else 1  # gradient accumulation over M micro-batches

        def run(a: int, b: int) -> None:
            for t in range(a, b):
                x, y = stream(t)
                opt.zero_grad(set_to_none=True)
                for xm, ym in zip(x.chunk(M), y.chunk(M)):
                    (lf(m(xm), ym) / M).backward()
                opt.step()

        return run

    from stalesim.emulator.replay import Emulator
    from stalesim.schedule import Kind

    kw = {"schedule": "sequential"} if name == "sequential" else {"schedule": "2bw", "stages": 4,
                                                                  "microbatches": 4}
    cfg = TrainConfig(model="gpt-char", dataset=dataset, iterations=iters, batch_size=batch,
                      data_dir=data_dir, optimizer="adamw", lr=3e-4, **kw).check()
    emu = Emulator(cfg, progress=False)
    emu._metrics_fh, emu._t0 = None, time.perf_counter()
    steps = emu.steps
    first: dict[int, int] = {}
    for i, a in enumerate(steps):
        if a.kind is Kind.F and a.stage == 0 and a.worker == 0:
            first.setdefault(a.batch, i)
    pos = {"i": 0}

    def run(a: int, b: int) -> None:
        end = first.get(b, len(steps))
        for k in range(pos["i"], end):
            emu._step(steps[k])
        pos["i"] = end

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds of 2 steps at batch 8 (smoke test)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 32 (--quick: 8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=3, help="steps per contender per round")
    args = ap.parse_args(argv or [])
    import torch

    torch.set_num_threads(args.threads)
    rounds, chunk = (2, 2) if args.quick else (args.rounds, args.chunk)
    args.batch_size = args.batch_size or (8 if args.quick else 32)
    data_dir = os.environ.get("STALESIM_DATA")
    shakespeare = bool(data_dir) and os.path.isfile(
        os.path.join(data_dir, "shakespeare", "shakespeare_complete.txt.gz"))
    dataset = "shakespeare" if shakespeare else "synthetic"
    warm = 1
    iters = warm + rounds * chunk + 4
    runs = {n: _setup(n, args.batch_size, iters, dataset, data_dir) for n in CONTENDERS}
    times: dict[str, list[float]] = {n: [] for n in CONTENDERS}
    for run in runs.values():  # warm-up step (allocator, first Adam state)
        run(0, warm)
    t = warm
    for _ in range(rounds):
        for n, run in runs.items():
            t0 = time.perf_counter()
            run(t, t + chunk)
            times[n].append((time.perf_counter() - t0) / chunk)
        t += chunk
    load = os.getloadavg()[0]
    print(f"gpt-char (4 x 128, 4 heads, block 128, 0.84 M params), AdamW, {dataset}, batch "
          f"{args.batch_size} x 128 = {args.batch_size * 128} characters/step, {args.threads} threads, "
          f"{rounds} rounds x {chunk} steps interleaved; load average now {load:.2f}")
    base = statistics.median(times["plain"])
    print(f"{'contender':<12} {'ms/step':>9} {'min':>9} {'max':>9} {'vs plain':>9}")
    for n in CONTENDERS:
        v = times[n]
        med = statistics.median(v)
        print(f"{n:<12} {med * 1e3:9.1f} {min(v) * 1e3:9.1f} {max(v) * 1e3:9.1f} {med / base:9.3f}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
