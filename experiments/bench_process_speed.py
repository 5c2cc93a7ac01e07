"""Does a process keep its own speed? Several processes compute the same thing in turns.

Every validated run, and every pass of the stage timing, is a fresh process. If a process
ran persistently faster or slower than another doing the same work (where its memory lands
in the caches, which pages it gets), the runs and the stage times would differ by that
factor whatever the model says, and repeats would show it as noise. This starts
``--processes`` processes that build the same model with the same inputs and take turns:
in each round every process times ``--per-turn`` forward+backward steps while the others
wait blocked, in an order rotated per round. Within a round the processes see the same
moment of the machine, so a process's time over the round's median is its own factor
with the drift taken out. ``--sets`` repeats this with new processes.

Prints per process the median factor over rounds with its quartiles, and the spread of
the processes' median factors against the spread a process shows from round to round;
``--out FILE`` writes them as JSON.

    ../shared/tools/quiet run python -m experiments.bench_process_speed --model resnet20 --batch-size 16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.block_ratios import save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import int_type, positive_int


def _worker(i: int, n: int, model: str, batch_size: int, rounds: int, per_turn: int, turn: Any,
            wake: list[Any], out: str) -> None:  # pragma: no cover - a child process
    """Process ``i`` of ``n``: in round r it computes when ``turn`` says it is its place in
    the order (rotated by r), then hands the turn on and wakes the next."""
    import torch

    from stalesim.runtime.build import model_of
    from stalesim.runtime.tasks import loss_fn

    torch.set_num_threads(1)
    net = model_of(model, None, seed=0).train()
    x, y = net.random_batch(batch_size, torch.Generator().manual_seed(0))
    loss_of = loss_fn(net.task)
    loss_of(net(x), y).backward()  # built, allocated and warm before the first turn
    net.zero_grad(set_to_none=True)
    times: list[float] = []
    for r in range(rounds):
        order = [(k + r) % n for k in range(n)]
        place = order.index(i)
        while int(turn.value) != r * n + place:  # blocked until the previous one hands on
            wake[i].wait(0.5)
            wake[i].clear()
        got = []
        for _ in range(per_turn + 1):
            t0 = time.perf_counter()
            loss_of(net(x), y).backward()
            net.zero_grad(set_to_none=True)
            got.append(time.perf_counter() - t0)
        times.append(statistics.median(got[1:]))  # the first step after a wait left out
        turn.value = r * n + place + 1
        nxt = order[place + 1] if place + 1 < n else (r + 1) % n if r + 1 < rounds else None
        if nxt is not None:
            wake[nxt].set()
    Path(out).write_text(json.dumps(times))


def one_set(model: str, batch_size: int, n: int, rounds: int, per_turn: int) -> list[list[float]]:
    """Per process of one set, its median step time (s) in each round."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    turn = ctx.Value("q", 0, lock=False)
    wake = [ctx.Event() for _ in range(n)]
    with tempfile.TemporaryDirectory() as d:
        outs = [os.path.join(d, f"{i}.json") for i in range(n)]
        procs = [ctx.Process(target=_worker, args=(i, n, model, batch_size, rounds, per_turn, turn, wake, outs[i]))
                 for i in range(n)]
        for p in procs:
            p.start()
        wake[0].set()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise SystemExit("bench_process_speed: a process failed")
        return [json.loads(Path(o).read_text()) for o in outs]


def factors(times: list[list[float]]) -> list[list[float]]:
    """Each process's time in each round over that round's median over the processes."""
    rounds = len(times[0])
    med = [statistics.median(t[r] for t in times) for r in range(rounds)]
    return [[t[r] / med[r] for r in range(rounds)] for t in times]


def summarize(per_set: list[list[list[float]]]) -> dict[str, Any]:
    """Per process its median factor and quartiles; the spread (max - min) of the median
    factors within each set, and the median over processes of each one's interquartile
    range over rounds (what a process varies by from round to round)."""
    procs = []
    spread = []
    for times in per_set:
        fs = factors(times)
        meds = [statistics.median(f) for f in fs]
        spread.append(max(meds) - min(meds))
        for t, f, m in zip(times, fs, meds):
            q = statistics.quantiles(f, n=4)
            procs.append({"median": m, "q1": q[0], "q3": q[2], "step_ms": statistics.median(t) * 1e3})
    return {"processes": procs, "set_spread": spread,
            "median_iqr": statistics.median(p["q3"] - p["q1"] for p in procs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="resnet20")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--processes", type=int_type(2), default=4)
    p.add_argument("--rounds", type=int_type(2), default=20)
    p.add_argument("--per-turn", type=positive_int, default=4, help="timed steps per process and round")
    p.add_argument("--sets", type=positive_int, default=3, help="sets of fresh processes, one after the other")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    per_set = [one_set(a.model, a.batch_size, a.processes, a.rounds, a.per_turn) for _ in range(a.sets)]
    res = {"model": a.model, "batch_size": a.batch_size, "rounds": a.rounds, "per_turn": a.per_turn,
           "times_s": per_set, **summarize(per_set)}
    k = 0
    for s, times in enumerate(per_set):
        for _ in times:
            pr = res["processes"][k]
            print(f"set {s} process {k}: step {pr['step_ms']:.1f} ms, factor median {pr['median']:.3f} "
                  f"(quartiles {pr['q1']:.3f}-{pr['q3']:.3f})")
            k += 1
    print("spread of the processes' median factors per set: "
          + ", ".join(f"{x:.3f}" for x in res["set_spread"])
          + f"; a process's interquartile range over rounds (median): {res['median_iqr']:.3f}")
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
