"""What a CPU rank's next action costs after it waited: back to back, after a wait on the
same core, after a wait that wakes it on another core.

A pipeline rank waits for messages; on wake-up an unpinned process may be placed on
another core, whose private caches do not hold its weights and activations. This times
one process's forward and backward of a zoo model at one batch size in three conditions,
interleaved per iteration (so the machine's drift cancels in the ratios), in blocks:

* ``b2b``: the action right after the previous one;
* ``wait``: after sleeping ``--wait-ms`` on the same core;
* ``wait+move``: after sleeping ``--wait-ms``, moved to the next core first (what the
  kernel may do to an unpinned rank).

Prints per block the mean ms of each, and the median ratio over blocks of each wait
condition to ``b2b`` with its range; ``--out FILE`` writes them as JSON. Needs two cores.
The reason :mod:`stalesim.runtime.affinity` pins the executor's CPU ranks.

    ../shared/tools/quiet run python -m experiments.bench_wake --model resnet20 --batch-size 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from experiments.block_ratios import print_ratios, ratios_to, save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import nonneg_float, positive_int
from stalesim.schedule.actions import Kind

CONDITIONS = ("b2b", "wait", "wait+move")
#: the two actions timed: a forward and a backward of the whole model
TIMED = (Kind.F.value, Kind.B.value)


def run(model: str, batch_size: int, wait_s: float, blocks: int, per_block: int) -> dict[str, Any]:
    import torch

    from stalesim.runtime.build import model_of
    from stalesim.runtime.tasks import loss_fn

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("bench_wake: needs two cores")
    torch.set_num_threads(1)
    net = model_of(model, None, seed=0).train()
    x, y = net.random_batch(batch_size, torch.Generator().manual_seed(0))
    loss_of = loss_fn(net.task)
    where = 0
    rows: list[dict[str, Any]] = []
    try:
        for block in range(blocks):
            where = 0
            os.sched_setaffinity(0, {cores[where]})
            t: dict[str, dict[str, list[float]]] = {c: {k: [] for k in TIMED} for c in CONDITIONS}
            for it in range(per_block * len(CONDITIONS) + len(CONDITIONS)):
                cond = CONDITIONS[it % len(CONDITIONS)]

                def before(cond: str = cond) -> None:
                    nonlocal where
                    if cond != "b2b":
                        time.sleep(wait_s)
                    if cond == "wait+move":
                        where = (where + 1) % len(cores)
                        os.sched_setaffinity(0, {cores[where]})

                before()
                t0 = time.perf_counter()
                out = net(x)
                t1 = time.perf_counter()
                loss = loss_of(out, y)
                before()
                t2 = time.perf_counter()
                loss.backward()
                t3 = time.perf_counter()
                net.zero_grad(set_to_none=True)
                if it >= len(CONDITIONS):  # the first of each condition is a warm-up
                    for k, dt in zip(TIMED, (t1 - t0, t3 - t2)):
                        t[cond][k].append(dt)
            row = {c: {k: statistics.fmean(v) for k, v in d.items()} for c, d in t.items()}
            rows.append(row)
            print(f"block {block}: " + "  ".join(
                f"{c} F {row[c]['F'] * 1e3:.2f} B {row[c]['B'] * 1e3:.2f} ms" for c in CONDITIONS), flush=True)
    finally:
        os.sched_setaffinity(0, set(cores))
    ratios = ratios_to(rows, CONDITIONS[0], TIMED)
    return {"model": model, "batch_size": batch_size, "wait_s": wait_s, "blocks": rows, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="resnet20")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--wait-ms", type=nonneg_float, default=30.0)
    p.add_argument("--blocks", type=positive_int, default=8)
    p.add_argument("--per-block", type=positive_int, default=8, help="timed iterations per condition and block")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    res = run(a.model, a.batch_size, a.wait_ms / 1e3, a.blocks, a.per_block)
    print_ratios(res["ratios"], CONDITIONS[0])
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
