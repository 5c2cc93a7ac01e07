"""Emulator cost: wall time and memory of stale / pipedream S=4 relative to sequential.

``python -m benchmarks.bench_emulator [--quick]``. Each configuration runs in a
fresh subprocess (so peak RSS is its own), configurations are interleaved over
``--rounds`` rounds and the fastest round is kept (the machine may be shared).
Reported per configuration: seconds per iteration, ratio to ``sequential`` on
the same model and partition (goal <= 1.05), peak RSS, and the bytes the
emulator tracks: stashed weight versions and in-flight stage inputs.
A plain PyTorch training loop (no emulator) is timed as a reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
spec = json.loads(sys.argv[1])
from stalesim.runtime.config import TrainConfig
if spec["schedule"] == "plain":
    from stalesim.workloads.zoo import build_model
    from stalesim.runtime.data import batch_stream
    cfg = TrainConfig(model=spec["model"], dataset=spec["dataset"], iterations=spec["iters"],
                      batch_size=spec["batch"], data_dir=spec.get("data_dir"),
                      synthetic_size=spec["batch"] * 8, lr=0.01)
    m = build_model(spec["model"], seed=0)
    stream = batch_stream(cfg, input_shape=m.input_shape)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    def step(t):
        x, y = stream(t)
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    for t in range(spec["warm"]): step(t)
    t0 = time.perf_counter()
    for t in range(spec["iters"]): step(t)
    dt = time.perf_counter() - t0
    out = {"s_per_iter": dt / spec["iters"], "stash": 0, "inflight": 0}
else:
    from stalesim.emulator.engine import Emulator
    cfg = TrainConfig(model=spec["model"], dataset=spec["dataset"], schedule=spec["schedule"],
                      stages=4, iterations=spec["iters"] + spec["warm"], batch_size=spec["batch"],
                      data_dir=spec.get("data_dir"), synthetic_size=spec["batch"] * 8, lr=0.01)
    emu = Emulator(cfg, progress=False)
    # time the replay after `warm` iterations' worth of actions
    steps = emu.steps
    cut = next(i for i, a in enumerate(steps) if a.batch >= spec["warm"])
    emu.steps = steps[:cut]; emu._metrics_fh = None; emu._t0 = time.perf_counter(); emu._replay(None)
    emu.steps = steps
    t0 = time.perf_counter(); emu._replay(None); dt = time.perf_counter() - t0
    out = {"s_per_iter": dt / spec["iters"],
           "stash": sum(r.stash_peak_bytes for row in emu.rts for r in row),
           "inflight": emu.peak_inflight_bytes}
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def _child(spec: dict, threads: int) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(threads)],
                         capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_emulator")
    ap.add_argument("--quick", action="store_true", help="fewer iterations and rounds")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data-dir", default=os.environ.get("STALESIM_DATA"))
    args = ap.parse_args(argv if argv is not None else [])
    rounds = args.rounds or (1 if args.quick else 3)
    have_mnist = bool(args.data_dir) and os.path.isdir(os.path.join(args.data_dir, "MNIST"))
    workloads = [
        ("lenet5", "mnist" if have_mnist else "synthetic", 128, 40 if args.quick else 200, 20),
        ("resnet20", "synthetic", 128, 5 if args.quick else 20, 4),
    ]
    scheds = ["plain", "sequential", "stale", "pipedream"]
    results: dict[tuple, list[dict]] = {}
    for _ in range(rounds):
        for model, data, batch, iters, warm in workloads:
            for sched in scheds:
                spec = {"model": model, "dataset": data, "batch": batch, "iters": iters, "warm": warm,
                        "schedule": sched, "data_dir": args.data_dir}
                results.setdefault((model, data, sched), []).append(_child(spec, args.threads))
    print(f"threads={args.threads} rounds={rounds} (best round kept)")
    print(f"{'workload':22} {'schedule':11} {'ms/iter':>9} {'vs seq':>7} {'peak RSS MiB':>13} "
          f"{'stash MiB':>10} {'in-flight in MiB':>17}")
    for model, data, *_ in workloads:
        best = {s: min(results[(model, data, s)], key=lambda r: r["s_per_iter"]) for s in scheds}
        seq = best["sequential"]["s_per_iter"]
        for s in scheds:
            r = best[s]
            print(f"{model + '/' + data:22} {s + (' S=4' if s != 'plain' else ''):11} "
                  f"{1000 * r['s_per_iter']:9.2f} {r['s_per_iter'] / seq:7.3f} {r['rss_mib']:13.0f} "
                  f"{r['stash'] / 2**20:10.2f} {r['inflight'] / 2**20:17.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
