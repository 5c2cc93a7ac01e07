"""Does the stage timing agree with itself? The same stages timed in the layouts of several
schedules, pass after pass.

``validate`` times each stage layout (the cut, the action batch, which stages are hooked
or split) in its own processes, one pass per round of runs
(:class:`stalesim.validate.stagetime.LayoutTimer`). Schedules that share a cut and an
action batch run the same modules; where their layouts differ only in hooks or a split
backward, their forwards should time alike. This times, alone, each given schedule's
layout in a fresh process per pass, the schedules' order rotated per pass, and prints per
pass and schedule each stage's mean forward, then per schedule the median over passes:
the spread between schedules is what the layout adds, the spread between passes what one
pass of the machine adds (and so what a prediction from a few passes inherits).

    ../shared/tools/quiet run python -m experiments.bench_layout_timing --model resnet32 \\
        --batch-size 64 --ppv 11 --schedules gpipe,2bw,zb-h1 --passes 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from types import SimpleNamespace
from typing import Any

from experiments.block_ratios import save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import int_list, positive_int
from stalesim.schedule.registry import schedule_names


def run(model: str, batch_size: int, microbatches: int, ppv: list[int], schedules: list[str], passes: int,
        rounds: int, dataset: str = "synthetic") -> dict[str, Any]:
    """Per schedule, per pass, per stage: the mean forward (ms) of ``rounds`` timed rounds."""
    from stalesim.validate.stagetime import measure_stage_times
    from stalesim.validate.steps import train_config

    cfg = SimpleNamespace(model=model, dataset=dataset, microbatches=microbatches, batch_size=batch_size,
                          lr=0.05, seed=0, data_dir=None, iterations=40)
    n_dev = len(ppv) + 1
    tcs = {s: train_config(cfg, s, n_dev, ppv, 40) for s in schedules}
    forwards: dict[str, list[list[float]]] = {s: [] for s in schedules}
    for p in range(passes):
        k = p % len(schedules)
        for s in schedules[k:] + schedules[:k]:
            times = measure_stage_times(tcs[s], rounds=rounds, full_batch=batch_size)  # a fresh process
            forwards[s].append([st["F"] * 1e3 for st in times.mean_s])
        print(f"pass {p}: " + "  ".join(f"{s} F " + "/".join(f"{f:.1f}" for f in forwards[s][-1])
                                        for s in schedules), flush=True)
    medians = {s: [statistics.median(f[i] for f in forwards[s]) for i in range(len(forwards[s][0]))]
               for s in schedules}
    return {"model": model, "batch_size": batch_size, "microbatches": microbatches, "ppv": ppv,
            "passes": passes, "rounds": rounds, "forward_ms": forwards, "median_forward_ms": medians}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="resnet32")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--microbatches", type=positive_int, default=4)
    p.add_argument("--ppv", type=int_list, default=[11], help="the cut, comma-separated (as validate's --ppv)")
    p.add_argument("--schedules", default="gpipe,2bw,zb-h1")
    p.add_argument("--passes", type=positive_int, default=5)
    p.add_argument("--rounds", type=positive_int, default=6, help="timed rounds per pass")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    schedules = [s for s in a.schedules.split(",") if s]
    unknown = [s for s in schedules if s not in schedule_names()]
    if not schedules or unknown:
        p.error(f"--schedules: unknown {unknown or a.schedules!r} (known: {', '.join(schedule_names())})")
    res = run(a.model, a.batch_size, a.microbatches, a.ppv, schedules, a.passes, a.rounds)
    for s, m in res["median_forward_ms"].items():
        print(f"{s}: forward per stage, median over passes " + "/".join(f"{x:.1f}" for x in m) + " ms")
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
