"""The ranks' heap policy, side by side: glibc's default vs the kept heap (stalesim.runtime.heap).

``python -m benchmarks.bench_heap [--quick] [--model resnet32] [--batch 64]
[--schedules sequential,1f1b,pipedream] [--iterations 20] [--rounds 3] [--json]``

Each round runs every schedule on 2 CPU ranks twice, once with ``STALESIM_HEAP=default``
(glibc's trim and moving mmap threshold) and once with the kept heap, in an order that
alternates between rounds; per schedule and policy the median over rounds of the measured
iteration time (the executor's steady window), and the ratio default / kept (> 1: the kept
heap is faster). Run it through ``/work/shared/tools/quiet run`` (it prints the load).
``--quick``: LeNet-5, ``1f1b`` only, 6 iterations, one round (the option's own values win).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

POLICIES = ("default", "kept")


def _run(model: str, schedule: str, batch: int, micro: int, iterations: int, policy: str) -> float:
    from stalesim.executor import make_job, run_local
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.heap import HEAP_ENV
    from stalesim.schedule import get_spec

    cfg = TrainConfig(model=model, dataset="synthetic", schedule=schedule, stages=2,
                      microbatches=micro if get_spec(schedule).uses_micro else 1, iterations=iterations,
                      batch_size=batch, synthetic_size=max(batch * 4, 512)).check()
    env = {HEAP_ENV: "default"} if policy == "default" else {}
    res = run_local(make_job(cfg, evaluate=False), "cpu:2", timeout_s=600, threads=1, env=env)
    return float(res["iteration_time_s"])


def measure(model: str, batch: int, micro: int, schedules: list[str], iterations: int,
            rounds: int) -> dict[str, Any]:
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        order = POLICIES if r % 2 == 0 else POLICIES[::-1]
        for name in schedules:
            for policy in order:
                times.setdefault((name, policy), []).append(_run(model, name, batch, micro, iterations, policy))
    rows = []
    for name in schedules:
        d, k = (statistics.median(times[(name, p)]) for p in POLICIES)
        rows.append({"schedule": name, "default_ms": d * 1e3, "kept_ms": k * 1e3, "default_over_kept": d / k,
                     "default_runs_ms": [x * 1e3 for x in times[(name, "default")]],
                     "kept_runs_ms": [x * 1e3 for x in times[(name, "kept")]]})
    return {"model": model, "batch": batch, "microbatches": micro, "iterations": iterations, "rounds": rounds,
            "load_average": list(os.getloadavg()), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_heap", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="lenet5, 1f1b, 6 iterations, 1 round")
    ap.add_argument("--model", default=None, help="default resnet32 (--quick: lenet5)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--schedules", default=None, help="default sequential,1f1b,pipedream (--quick: 1f1b)")
    ap.add_argument("--iterations", type=int, default=None, help="default 20 (--quick: 6)")
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (--quick: 1)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    q = a.quick
    a.model = a.model or ("lenet5" if q else "resnet32")
    a.schedules = a.schedules or ("1f1b" if q else "sequential,1f1b,pipedream")
    a.iterations = a.iterations or (6 if q else 20)
    a.rounds = a.rounds or (1 if q else 3)
    print(f"load before {os.getloadavg()}", flush=True)
    out = measure(a.model, a.batch, a.micro, a.schedules.split(","), a.iterations, a.rounds)
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print("| schedule | glibc default ms | kept heap ms | default / kept | default runs | kept runs |")
        print("| --- | ---: | ---: | ---: | --- | --- |")
        for r in out["rows"]:
            print(f"| {r['schedule']} | {r['default_ms']:.1f} | {r['kept_ms']:.1f} | {r['default_over_kept']:.3f} | "
                  + ", ".join(f"{x:.0f}" for x in r["default_runs_ms"]) + " | "
                  + ", ".join(f"{x:.0f}" for x in r["kept_runs_ms"]) + " |")
    print(f"load after {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
