"""A stage's backward with its gradient buffers held as a micro-batched run holds them: time
and minor page faults per backward, under glibc's default heap and the kept heap
(:mod:`stalesim.runtime.heap`), by micro-batch position.

Why: on AlexNet, every micro-batched schedule ran its fully connected stage's backward 30-65%
slower than ``validate``'s stage timing said, while whole-batch schedules ran it faster.
Here each policy runs in a fresh spawned process holding every stage of the cut (as the
stage timing's processes do), for ``--batches`` batches of ``--micro`` micro-batches, in two
regimes:

* ``run``: every micro-batch's F through the stages, the LOSS, every B in reverse, adding
  its weight gradients into the batch's buffer (all but the first micro-batch of a batch),
  then every stage's U, which consumes the buffer: a GPipe iteration on one process;
* ``fresh``: every round a new batch whose buffer is dropped after its backwards: the
  stage timing before it added into buffers (no addition, no update).

Per policy, regime, stage and micro-batch position: the median ms of F and of B and B's median
minor faults (``getrusage``) over the batches after the first two. Policies alternate in order over
``--repeats``.

    ../shared/tools/quiet run python -m experiments.bench_grad_faults --model alexnet --ppv 5 \\
        --micro-batch 8 --micro 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from experiments.block_ratios import save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import positive_int
from stalesim.errors import StalesimError

POLICIES = ("default", "kept")
REGIMES = ("run", "fresh")
#: batches left out at the start of each process (its heap and caches warm up)
WARMUP_BATCHES = 2


def _minor_faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _measure(model: str, ppv: list[int], micro_batch: int, micro: int, batches: int, policy: str,
             regime: str) -> dict[str, Any]:  # pragma: no cover - a child process
    """One process: per stage, per micro-batch position, B's milliseconds and minor faults."""
    import time

    import torch

    from stalesim.runtime.build import build_stage_modules, model_of, stage_runtimes
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.heap import keep_heap
    from stalesim.schedule import Action, Kind, build_schedule

    if policy == "kept":
        keep_heap()
    torch.set_num_threads(1)
    n = batches + WARMUP_BATCHES
    tc = TrainConfig(model=model, dataset="synthetic", schedule="gpipe", ppv=ppv, microbatches=micro,
                     batch_size=micro_batch * micro, iterations=n)
    sched = build_schedule(tc.schedule_config(n))
    mods = build_stage_modules(tc, sched, model=model_of(tc.model, tc.dataset, seed=0))
    rts = stage_runtimes(tc, sched, mods, worker=0, stages=range(sched.stages), device="cpu", total=n)
    x, y = mods.model.random_batch(micro_batch, torch.Generator().manual_seed(0), tc.torch_dtype)
    S = sched.stages
    ms: list[list[list[float]]] = [[[] for _ in range(micro)] for _ in range(S)]
    fms: list[list[list[float]]] = [[[] for _ in range(micro)] for _ in range(S)]
    faults: list[list[list[int]]] = [[[] for _ in range(micro)] for _ in range(S)]
    for t in range(n):
        for m in range(micro):
            h = x
            for s in range(S):
                xin = h.detach().clone()
                if s > 0:
                    xin.requires_grad_(True)
                t0 = time.perf_counter()
                h = rts[s].forward(Action(Kind.F, s, t, m), xin)
                if t >= WARMUP_BATCHES:
                    fms[s][m].append((time.perf_counter() - t0) * 1e3)
                if rts[s].is_loss_stage:
                    rts[s].loss(Action(Kind.LOSS, s, t, m), y)
            g: torch.Tensor | None = None
            for s in reversed(range(S)):
                gin: torch.Tensor | None = None if g is None else g.detach().clone()
                f0, t0 = _minor_faults(), time.perf_counter()
                g = rts[s].backward(Action(Kind.B, s, t, m), gin)
                if t >= WARMUP_BATCHES:
                    ms[s][m].append((time.perf_counter() - t0) * 1e3)
                    faults[s][m].append(_minor_faults() - f0)
                if regime == "fresh":
                    rts[s].buffers.clear()
        if regime == "run":
            for s in range(S):
                rts[s].update(Action(Kind.U, s, t, None))
    return {"ms": [[statistics.median(v) for v in st] for st in ms],
            "f_ms": [[statistics.median(v) for v in st] for st in fms],
            "faults": [[statistics.median(v) for v in st] for st in faults]}


def measure(model: str, ppv: list[int], micro_batch: int, micro: int, batches: int,
            repeats: int) -> dict[str, Any]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(repeats):
        for regime in REGIMES:
            for policy in (POLICIES if r % 2 == 0 else POLICIES[::-1]):
                with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                    got.setdefault((policy, regime), []).append(pool.submit(
                        _measure, model, ppv, micro_batch, micro, batches, policy, regime).result())
    rows = []
    for (policy, regime), runs in got.items():
        for s in range(len(runs[0]["ms"])):
            for m in range(micro):
                rows.append({"policy": policy, "regime": regime, "stage": s, "micro": m,
                             "b_ms": statistics.median(x["ms"][s][m] for x in runs),
                             "b_ms_runs": [x["ms"][s][m] for x in runs],
                             "f_ms": statistics.median(x["f_ms"][s][m] for x in runs),
                             "minor_faults": statistics.median(x["faults"][s][m] for x in runs)})
    return {"model": model, "ppv": ppv, "micro_batch": micro_batch, "micro": micro, "batches": batches,
            "repeats": repeats, "load_average": list(os.getloadavg()), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_grad_faults",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=zoo_model, default="alexnet")
    ap.add_argument("--ppv", type=lambda t: [positive_int(x) for x in t.split(",")], default=[5],
                    help="the cut, as validate's ppv (default 5: AlexNet's convolutions | its linear layers)")
    ap.add_argument("--micro-batch", type=positive_int, default=8)
    ap.add_argument("--micro", type=positive_int, default=4)
    ap.add_argument("--batches", type=positive_int, default=6)
    ap.add_argument("--repeats", type=positive_int, default=2)
    ap.add_argument("--out", help="write the result as JSON here")
    a = ap.parse_args(argv)
    print(f"load before {os.getloadavg()}", flush=True)
    try:
        out = measure(a.model, a.ppv, a.micro_batch, a.micro, a.batches, a.repeats)
    except StalesimError as exc:  # a cut the model cannot take, raised in the first process
        print(f"bench_grad_faults: error: {exc}", file=sys.stderr)
        return 2
    print("| policy | regime | stage | micro-batch | F ms | B ms | B's minor faults |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in out["rows"]:
        print(f"| {r['policy']} | {r['regime']} | {r['stage']} | {r['micro']} | {r['f_ms']:.1f} | {r['b_ms']:.1f} | "
              f"{r['minor_faults']:.0f} |")
    if a.out:
        save_json(a.out, out)
    print(f"load after {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
