"""Executor overhead per component: what a rank pays besides the arithmetic.

``python -m benchmarks.bench_overhead [--quick] [--model lenet5] [--batch 64] [--micro 4] [--reps N] [--json]``
(``--quick``: 20 repeats instead of 200)

1. **Dispatch loop** (in-process, one rank, no communication): a real
   :class:`stalesim.executor.rank.Rank` runs ``sequential`` S = 1 over ``--reps`` batches;
   per action, the loop's own time (wall minus the handler spans it recorded)
   and, inside it, each piece on its own: the trace label, the beacon write, the
   timestamps, the memory tracking.
2. **Stage runtime** (in-process): a real stage of the model at the micro-batch
   through :class:`StageRuntime` (saved-tensor hooks, version bookkeeping,
   per-batch gradient buffer) vs the same arithmetic called bare.
3. **Messages** (2 gloo ranks): posting a send and completing a receive of the
   activation alone, and of activation + labels as the executor sends them.

Every number is a median over repeats, in microseconds per action or message.
Run it through ``/work/shared/tools/quiet run`` (it prints the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def _med_us(xs: list[float]) -> float:
    return statistics.median(xs) * 1e6 if xs else float("nan")


# ------------------------------------------------------------------ 1. dispatch loop
def dispatch_loop(model: str, batch: int, reps: int) -> dict[str, float]:
    import torch

    from stalesim.executor.faults import Beacon
    from stalesim.executor.measure import Recorder, label_of
    from stalesim.executor.rank import Rank, RankContext
    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.runtime.config import TrainConfig
    from stalesim.runtime.data import batch_stream
    from stalesim.schedule import build_schedule

    torch.set_num_threads(1)
    cfg = TrainConfig(model=model, dataset="synthetic", schedule="sequential", stages=1, iterations=reps,
                      batch_size=batch, synthetic_size=max(batch * 4, 256)).check()
    sched = build_schedule(cfg.schedule_config(reps))
    mods = build_stage_modules(cfg, sched)
    rts = {(0, s): rt for s, rt in stage_runtimes(cfg, sched, mods, worker=0, stages=[0],
                                                     device="cpu", total=reps).items()}
    stream = batch_stream(cfg, input_shape=mods.model.input_shape)
    with tempfile.TemporaryDirectory() as d:
        ctx = RankContext(rank=0, world=1, local_rank=0, device=torch.device("cpu"), backend="gloo",
                          timeout_s=30, beacon=Beacon(os.path.join(d, "beacon")))
        rank = Rank(ctx, sched, cfg, rts, stream, [])
        rank.memory.init_static()
        rank.rec.start_clock()
        t0 = time.perf_counter()
        rank.run()
        wall = time.perf_counter() - t0
        rows = rank.rec.finish()
        handler = sum(r[7] - r[6] for r in rows)
        n = len(rows)
        gaps = [b[6] - a[7] for a, b in zip(rows, rows[1:])]
        acts = sched.device_actions[0]
        # pieces, each timed alone over the same actions
        lab = []
        for a in acts:
            s = time.perf_counter()
            label_of(a)
            lab.append(time.perf_counter() - s)
        bea = []
        for _a in acts:
            s = time.perf_counter()
            ctx.beacon.set("0F12.3")
            bea.append(time.perf_counter() - s)
        rec = Recorder(actions=acts)
        rec.start_clock()
        stamps = []
        for i in range(len(acts)):
            s = time.perf_counter()
            st = rec.begin()
            rec.end(i, st)
            stamps.append(time.perf_counter() - s)
        mem = []
        for _ in acts:
            s = time.perf_counter()
            rank.memory.track()
            mem.append(time.perf_counter() - s)
    return {"loop_per_action_us": (wall - handler) / n * 1e6, "gap_median_us": _med_us(gaps),
            "actions": n,
            "label_us": _med_us(lab), "beacon_us": _med_us(bea), "timestamps_us": _med_us(stamps),
            "track_memory_us": _med_us(mem)}


# ------------------------------------------------------------------ 2. stage runtime
def stage_runtime(model: str, batch: int, micro: int, reps: int) -> dict[str, float]:
    """F and B of stage 1 of a 2-stage split at the micro-batch: runtime vs bare."""
    import torch
    import torch.nn.functional as F

    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import Kind, build_schedule

    torch.set_num_threads(1)
    cfg = TrainConfig(model=model, dataset="synthetic", schedule="1f1b", stages=2, microbatches=micro,
                      iterations=reps + 2, batch_size=batch).check()
    sched = build_schedule(cfg.schedule_config(reps + 2))
    mods = build_stage_modules(cfg, sched)
    rt = stage_runtimes(cfg, sched, mods, worker=0, stages=[0], device="cpu", total=reps + 2)[0]
    mb = batch // micro
    x = torch.randn((mb, *mods.model.input_shape))
    acts = [a for a in sched.device_actions[0] if a.kind in (Kind.F, Kind.B, Kind.U)]
    shape = None
    f_rt, b_rt = [], []
    for a in acts:
        if a.kind is Kind.F:
            s = time.perf_counter()
            y = rt.forward(a, x)
            f_rt.append(time.perf_counter() - s)
            shape = y.shape
        elif a.kind is Kind.B:
            g = torch.ones(shape)
            s = time.perf_counter()
            rt.backward(a, g)
            b_rt.append(time.perf_counter() - s)
        else:
            rt.update(a)
    mod = mods.stages[0]
    params = [p for p in mod.parameters() if p.requires_grad]
    f_bare, b_bare = [], []
    for _ in range(len(f_rt)):
        s = time.perf_counter()
        y = mod(x)
        f_bare.append(time.perf_counter() - s)
        s = time.perf_counter()
        torch.autograd.grad(y, params, torch.ones_like(y))
        b_bare.append(time.perf_counter() - s)
    del F
    return {"F_runtime_us": _med_us(f_rt[2:]), "F_bare_us": _med_us(f_bare[2:]),
            "B_runtime_us": _med_us(b_rt[2:]), "B_bare_us": _med_us(b_bare[2:]),
            "F_overhead_us": _med_us(f_rt[2:]) - _med_us(f_bare[2:]),
            "B_overhead_us": _med_us(b_rt[2:]) - _med_us(b_bare[2:])}


# ------------------------------------------------------------------------ 3. messages
def _msg_worker(rank: int, port: int, shape: list[int], labels: int, reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    act = torch.randn(shape)
    lab = torch.randint(0, 10, (labels,))
    res: dict[str, list[float]] = {"post_act": [], "post_both": [], "wait_act": [], "wait_both": []}
    ack = torch.zeros(1)
    for mode in ("act", "both") * 2:
        for i in range(reps):
            tag = i * 4
            if rank == 0:
                s = time.perf_counter()
                w = [dist.isend(act, 1, tag=tag)]
                if mode == "both":
                    w.append(dist.isend(lab, 1, tag=tag + 1))
                res[f"post_{mode}"].append(time.perf_counter() - s)
                for x in w:
                    x.wait()
                dist.recv(ack, 1, tag=tag + 2)
            else:
                ba, bl = torch.empty(shape), torch.empty(labels, dtype=torch.int64)
                w = [dist.irecv(ba, 0, tag=tag)]
                if mode == "both":
                    w.append(dist.irecv(bl, 0, tag=tag + 1))
                time.sleep(0.002)  # the message is there before the wait (no blocking measured)
                s = time.perf_counter()
                for x in w:
                    x.wait()
                res[f"wait_{mode}"].append(time.perf_counter() - s)
                dist.send(ack, 0, tag=tag + 2)
    box: list[Any] = [None, None]
    dist.all_gather_object(box, res)
    if rank == 0:
        merged = {k: v for r in box for k, v in r.items() if v}
        from stalesim.atomic import write_json_atomic  # the parent never reads a half-written file

        write_json_atomic(out, {k: _med_us(v) for k, v in merged.items()}, compact=True)
    dist.destroy_process_group()


def messages(model: str, batch: int, micro: int, reps: int) -> dict[str, float]:
    import torch
    import torch.multiprocessing as mp

    from stalesim.rendezvous import free_port
    from stalesim.workloads.zoo import build_model

    m = build_model(model, seed=0)
    with torch.no_grad():
        y = m.blocks[0](torch.zeros((1, *m.input_shape)))
    shape = [batch // micro, *y.shape[1:]]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m.json")
        mp.start_processes(_msg_worker, args=(free_port(), shape, batch // micro, reps, out), nprocs=2,
                           start_method="spawn")
        with open(out) as fh:
            res = json.load(fh)
    res["activation_shape"] = shape
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_overhead")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--reps", type=int, default=None, help="repeats (default 200; --quick: 20)")
    p.add_argument("--quick", action="store_true", help="20 repeats")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv if argv is not None else (sys.argv[1:] if __name__ == "__main__" else []))
    if args.reps is None:
        args.reps = 20 if args.quick else 200
    load0 = os.getloadavg()
    res = {"dispatch": dispatch_loop(args.model, args.batch // args.micro, args.reps),
           "runtime": stage_runtime(args.model, args.batch, args.micro, args.reps),
           "messages": messages(args.model, args.batch, args.micro, args.reps),
           "load_average": {"before": list(load0), "after": list(os.getloadavg())}}
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    for part in ("dispatch", "runtime", "messages"):
        print(f"[{part}]")
        for k, v in res[part].items():
            print(f"  {k:24s} {v:.1f}" if isinstance(v, float) else f"  {k:24s} {v}")
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f} "
          f"(cores: {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
