"""A nanoGPT-style training loop made a pipeline's, and checked against the emulator.

The loop is the usual one (forward, cross-entropy, ``backward()``, ``optimizer.step()``,
``zero_grad()``) on a character GPT; two lines make its weight staleness exactly that of a
pipeline schedule (``StalePipeline(...)`` and ``pipe.attach(optimizer)``). It trains three
times from the same initial weights on the same batches and prints the losses side by side:

* ``plain``: the loop as written (no staleness);
* ``wrapped``: the same loop with the two lines added;
* ``emulator``: ``stalesim emulate`` with the same model, stages, schedule, optimizer and data.

``wrapped`` must equal ``emulator`` (bit for bit in float64, the default); the gap between
``plain`` and ``wrapped`` is what the schedule's staleness costs. Exit status 1 if they
differ. The text is Shakespeare under ``--data-dir`` (or ``$STALESIM_DATA``); ``--dataset
synthetic`` needs no files::

    python examples/nanogpt_stale.py --data-dir ../shared/data --schedule pipedream --stages 4 --steps 40
"""

from __future__ import annotations

import argparse
import sys

import torch

from stalesim.emulator.replay import Emulator
from stalesim.inject import StalePipeline
from stalesim.runtime.build import run_model
from stalesim.runtime.config import TrainConfig
from stalesim.workloads.partition import split_stages


def config(args: argparse.Namespace) -> TrainConfig:
    """The run as the emulator takes it (the loops below use the same values)."""
    return TrainConfig(model=args.model, dataset=args.dataset, data_dir=args.data_dir, schedule=args.schedule,
                       stages=args.stages, microbatches=args.microbatches, iterations=args.steps,
                       batch_size=args.batch_size, optimizer="adamw", lr=args.lr, weight_decay=0.1,
                       dtype=args.dtype, seed=args.seed, synthetic_size=256, eval_windows=8).check()


def train(cfg: TrainConfig, batches: list[tuple[torch.Tensor, torch.Tensor]], *, staleness: bool
          ) -> tuple[list[float], StalePipeline | None]:
    """The user's loop. ``staleness``: with the two added lines."""
    model = run_model(cfg).to(cfg.torch_dtype)  # the zoo's char GPT, the same initial weights
    model.train()
    pipe = None
    if staleness:
        # stages: the emulator's FLOP-balanced cut, given as lists of submodules
        stages = [list(stage) for stage in split_stages(model, stages=cfg.stages)]
        pipe = StalePipeline(model, cfg.schedule, steps=len(batches), split=stages,
                             microbatches=cfg.microbatches)                                  # added line 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas),  # type: ignore[arg-type]
                                  eps=cfg.eps, weight_decay=cfg.weight_decay)
    if pipe is not None:
        pipe.attach(optimizer)                                                               # added line 2
    M = cfg.microbatches
    losses = []
    for x, y in batches:
        total = 0.0
        for xm, ym in zip(x.chunk(M), y.chunk(M)):  # gradient accumulation over M micro-batches
            logits = model(xm)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ym.flatten()) / M
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
    return losses, pipe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt-char:n_layer=4,n_embd=64,n_head=4,block_size=64")
    ap.add_argument("--dataset", default="shakespeare")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--schedule", default="pipedream")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cfg = config(args)
    emu = Emulator(cfg, progress=False)
    emu.replay()
    emulated = [emu.state.losses[t] for t in range(args.steps)]
    batches = [emu.stream(t) for t in range(args.steps)]  # the emulator's batches, in its order
    plain, _ = train(cfg, batches, staleness=False)
    wrapped, pipe = train(cfg, batches, staleness=True)
    assert pipe is not None
    print(f"{'step':>4} {'plain':>10} {'wrapped':>10} {'emulator':>10}")
    for t in range(args.steps):
        print(f"{t:>4} {plain[t]:>10.5f} {wrapped[t]:>10.5f} {emulated[t]:>10.5f}")
    worst = max(abs(a - b) for a, b in zip(wrapped, emulated))
    print(f"{cfg.schedule} S={cfg.stages}: staleness per stage {pipe.table.staleness()}, versions read = IR's: "
          f"{pipe.versions_match()}, extra weight copies at most {pipe.stash_peak_bytes / 2**20:.2f} MiB")
    print(f"wrapped vs emulator: largest loss difference {worst:.3g} ({'bit for bit' if worst == 0 else 'DIFFER'}); "
          f"mean loss plain {sum(plain) / len(plain):.4f}, wrapped {sum(wrapped) / len(wrapped):.4f}")
    return 0 if wrapped == emulated and pipe.versions_match() else 1


if __name__ == "__main__":
    sys.exit(main())
