"""Does waiting often slow a CPU process's compute *between* the waits? Blocks of steps
run back to back against blocks whose every forward and backward follows a short sleep.

The schedules whose ranks sit idle between actions compute 1.1-1.3x their stages timed
alone, uniformly over their actions, not only right after a wait (docs/validate.md),
while the action right after a wait costs at most a few percent more than the one before
it (``bench_wake``, ``bench_after_recv``). Those experiments interleave their conditions
per iteration, so their back-to-back baseline itself runs within ~100 ms of a wait. This
one compares long stretches: ``continuous`` blocks (``--steps`` forward+backward steps,
no pause, as the stage timing runs) against ``duty`` blocks (the same steps, a sleep of
``--wait-ms`` before every forward and every backward, as a pipeline rank waits for its
messages), alternating, the first half of each block's steps left out. The process stays
where the kernel puts it (an unpinned rank). ``--pause spin`` busy-waits instead of
sleeping: the core never goes idle, so a slowdown that remains is the pause itself, one
that goes away comes from the core idling (what the host or the kernel does meanwhile).

Prints per pair of blocks the mean forward and backward ms of each and the median ratio
``duty / continuous`` over pairs with its range; ``--out FILE`` writes them as JSON.

    ../shared/tools/quiet run python -m experiments.bench_duty_cycle --model resnet20 --batch-size 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from experiments.block_ratios import print_ratios, ratios_to, save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import int_type, nonneg_float, positive_int
from stalesim.schedule.actions import Kind

CONDITIONS = ("continuous", "duty")
PAUSES = ("sleep", "spin")


def _spin(seconds: float) -> None:
    """Busy-wait ``seconds`` (the core stays busy, touching almost no memory)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
#: the two actions timed: a forward and a backward of the whole model
TIMED = (Kind.F.value, Kind.B.value)


def run(model: str, batch_size: int, wait_s: float, pairs: int, steps: int,
        pause: str = "sleep") -> dict[str, Any]:
    """Per pair of blocks (one of each condition, which first alternating), per condition,
    the mean seconds of each timed kind over the block's second half."""
    import torch

    from stalesim.runtime.build import model_of
    from stalesim.runtime.tasks import loss_fn

    torch.set_num_threads(1)
    net = model_of(model, None, seed=0).train()
    x, y = net.random_batch(batch_size, torch.Generator().manual_seed(0))
    loss_of = loss_fn(net.task)
    wait = time.sleep if pause == "sleep" else _spin
    rows: list[dict[str, dict[str, float]]] = []
    for p in range(pairs + 1):  # the first pair warms up
        row: dict[str, dict[str, float]] = {}
        for cond in (CONDITIONS if p % 2 == 0 else CONDITIONS[::-1]):
            got: dict[str, list[float]] = {k: [] for k in TIMED}
            for i in range(steps):
                if cond == "duty":
                    wait(wait_s)
                t0 = time.perf_counter()
                loss = loss_of(net(x), y)
                t1 = time.perf_counter()
                if cond == "duty":
                    wait(wait_s)
                t2 = time.perf_counter()
                loss.backward()
                t3 = time.perf_counter()
                net.zero_grad(set_to_none=True)
                if i >= steps // 2:
                    got[TIMED[0]].append(t1 - t0)
                    got[TIMED[1]].append(t3 - t2)
            row[cond] = {k: statistics.fmean(v) for k, v in got.items()}
        if p > 0:
            rows.append({c: row[c] for c in CONDITIONS})
            print(f"pair {p - 1}: " + "  ".join(f"{c} F {row[c]['F'] * 1e3:.2f} B {row[c]['B'] * 1e3:.2f} ms"
                                                for c in CONDITIONS), flush=True)
    return {"model": model, "batch_size": batch_size, "wait_s": wait_s, "pause": pause, "steps": steps, "pairs": rows,
            "ratios": ratios_to(rows, CONDITIONS[0], TIMED)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="resnet20")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--wait-ms", type=nonneg_float, default=25.0)
    p.add_argument("--pairs", type=positive_int, default=8)
    p.add_argument("--steps", type=int_type(2), default=16, help="forward+backward steps per block")
    p.add_argument("--pause", choices=PAUSES, default="sleep", help="how a duty block waits")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    res = run(a.model, a.batch_size, a.wait_ms / 1e3, a.pairs, a.steps, a.pause)
    print_ratios(res["ratios"], CONDITIONS[0])
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
