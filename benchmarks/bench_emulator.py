"""Emulator cost: wall time and memory of stale / pipedream S=4 relative to sequential.

``python -m benchmarks.bench_emulator [--quick]`` (``--quick``: LeNet-5 only, 3 rounds of 3
batches after 3 of warm-up).

Time: the contenders (a plain PyTorch training loop, and the emulator running
``sequential``, ``stale`` and ``pipedream`` with S = 4 on the same partition)
live in one process and are run in interleaved chunks of a few mini-batches,
round after round; the median chunk time per contender is reported. On a
shared machine this is far more robust than timing whole runs one after the
other: a burst of foreign load hits all contenders alike.
Memory: each contender runs again in a fresh subprocess for its peak RSS, and
the emulator reports the bytes it tracks: stashed weight versions and the stage
inputs of in-flight forwards (the autograd graphs of in-flight forwards, which
a pipeline inherently keeps, show up in RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SCHEDS = ("plain", "sequential", "stale", "pipedream")


def _contender(name: str, model: str, dataset: str, batch: int, iters: int, data_dir: str | None):
    """A callable run(batches a..b) for one contender, plus an info() for memory figures."""
    import torch

    from stalesim.runtime.config import TrainConfig

    if name == "plain":
        from stalesim.runtime.data import batch_stream
        from stalesim.workloads.zoo import build_model

        cfg = TrainConfig(model=model, dataset=dataset, iterations=iters, batch_size=batch,
                          data_dir=data_dir, synthetic_size=batch * 8, lr=0.01)
        m = build_model(model, seed=0)
        stream = batch_stream(cfg, input_shape=m.input_shape)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def run(a: int, b: int) -> None:
            for t in range(a, b):
                x, y = stream(t)
                loss = torch.nn.functional.cross_entropy(m(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        return run, lambda: {"stash": 0, "inflight": 0}

    from stalesim.emulator.replay import Emulator
    from stalesim.schedule import Kind

    cfg = TrainConfig(model=model, dataset=dataset, schedule=name, stages=4, iterations=iters,
                      batch_size=batch, data_dir=data_dir, synthetic_size=batch * 8, lr=0.01)
    emu = Emulator(cfg, progress=False)
    emu._metrics_fh, emu._t0 = None, time.perf_counter()
    steps = emu.steps
    first = {}
    for i, a in enumerate(steps):  # chunk boundaries: first action of each batch's stage-0 forward
        if a.kind is Kind.F and a.stage == 0 and a.worker == 0:
            first.setdefault(a.batch, i)
    pos = {"i": 0}

    def run(a: int, b: int) -> None:
        end = first.get(b, len(steps))
        for k in range(pos["i"], end):
            act = steps[k]
            emu._step(act)
            if act.kind is Kind.F:
                emu._track_memory()
        pos["i"] = end

    def info() -> dict:
        return {"stash": sum(r.stash_peak_bytes for r in emu.rts.values()),
                "inflight": emu.peak_inflight_bytes}

    return run, info


def _interleaved(model: str, dataset: str, batch: int, chunk: int, rounds: int, warm: int,
                 data_dir: str | None) -> dict[str, dict]:
    iters = warm + chunk * rounds + 1
    cons = {n: _contender(n, model, dataset, batch, iters, data_dir) for n in SCHEDS}
    for run, _ in cons.values():
        run(0, warm)
    times: dict[str, list[float]] = {n: [] for n in SCHEDS}
    cpu: dict[str, list[float]] = {n: [] for n in SCHEDS}
    for r in range(rounds):
        a, b = warm + r * chunk, warm + (r + 1) * chunk
        order = SCHEDS if r % 2 == 0 else tuple(reversed(SCHEDS))
        for n in order:
            t0, c0 = time.perf_counter(), time.process_time()
            cons[n][0](a, b)
            times[n].append((time.perf_counter() - t0) / chunk)
            cpu[n].append((time.process_time() - c0) / chunk)
    return {n: {"s_per_iter": statistics.median(times[n]), "cpu_per_iter": statistics.median(cpu[n]),
                **cons[n][1]()} for n in SCHEDS}


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
from benchmarks.bench_emulator import _contender
spec = json.loads(sys.argv[1])
import torch; torch.set_num_threads(int(sys.argv[2]))
run, info = _contender(spec["name"], spec["model"], spec["dataset"], spec["batch"], spec["iters"], spec["data_dir"])
run(0, spec["iters"])
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM"))  # reset by exec, unlike ru_maxrss
print(json.dumps({"rss_mib": int(hwm.split()[1]) / 1024}))
"""


def _rss(spec: dict, threads: int) -> float:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(threads), root],
                         capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])["rss_mib"]


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_emulator")
    ap.add_argument("--quick", action="store_true", help="lenet5 only, fewer rounds")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data-dir", default=os.environ.get("STALESIM_DATA"))
    args = ap.parse_args(argv if argv is not None else [])
    torch.set_num_threads(args.threads)
    have_mnist = bool(args.data_dir) and os.path.isdir(os.path.join(args.data_dir, "MNIST"))
    q = args.quick
    workloads = [  # model, dataset, batch, chunk (batches), rounds, warm-up batches
        ("lenet5", "mnist" if have_mnist else "synthetic", 128, 10, 20, 10),
        ("resnet20", "synthetic", 128, 2, 8, 8),
    ] if not q else [("lenet5", "mnist" if have_mnist else "synthetic", 128, 3, 3, 3)]
    print(f"threads={args.threads}; median over interleaved chunks; RSS from fresh processes")
    print(f"{'workload':20} {'schedule':15} {'ms/iter':>8} {'vs seq':>7} {'CPU ms/iter':>11} "
          f"{'vs seq':>7} {'peak RSS MiB':>12} {'stash MiB':>9} {'in-flight inputs MiB':>20}")
    for model, data, batch, chunk, rounds, warm in workloads:
        res = _interleaved(model, data, batch, chunk, rounds, warm, args.data_dir)
        seq, cseq = res["sequential"]["s_per_iter"], res["sequential"]["cpu_per_iter"]
        for n in SCHEDS:
            r = res[n]
            rss = _rss({"name": n, "model": model, "dataset": data, "batch": batch,
                        "iters": warm + 2 * chunk, "data_dir": args.data_dir}, args.threads)
            label = n + (" S=4" if n != "plain" else "")
            print(f"{model + '/' + data:20} {label:15} {1000 * r['s_per_iter']:8.2f} "
                  f"{r['s_per_iter'] / seq:7.3f} {1000 * r['cpu_per_iter']:11.2f} "
                  f"{r['cpu_per_iter'] / cseq:7.3f} {rss:12.0f} {r['stash'] / 2**20:9.2f} "
                  f"{r['inflight'] / 2**20:20.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
