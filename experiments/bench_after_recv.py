"""What a CPU rank's next action costs after it waited while the other rank computed,
against back to back: two gloo ranks, the second one measured.

The cost model charges an action that follows an idle gap with the slowdown its stage
timing measures (:mod:`stalesim.validate.afterwait`). Validated runs of waiting schedules
are slower still after their waits, and a real rank differs from the timing in two ways
tested here: it blocks in gloo's ``work.wait`` while gloo's own thread receives the message
its next action reads; and the other rank computed during the wait and may stop when the
message leaves (in a two-stage pipeline with one micro-batch neither rank ever computes
while the other does). Rank 1 times one forward or one backward of the model, after

* ``b2b``: nothing (right after its previous action);
* ``sleep``: a sleep of ``--wait-ms`` while rank 0 is idle;
* ``sleep+busy``: a sleep of ``--wait-ms`` while rank 0 computes;
* ``recv+busy``: blocking on a posted receive that rank 0 sends after computing
  ``--wait-ms``; a forward reads the received tensor (the input's size);
* ``recv-tiny+busy``: the same with a one-element message, the forward reading its usual
  input (the wake-up path without the message's memory).

``--during idle``: rank 0 stops computing when the wait ends (it is idle in ``b2b`` and
``sleep``): each timed action runs alone, as in a pipeline whose ranks take turns.
``--during busy``: rank 0 computes throughout, every timed action is contended.
``--peer-batch``: the batch rank 0 computes in steps of (default 1: it sends and stops
within a few ms of the moment it should; the batch size itself: it works the caches as
hard as the other rank of a pipeline does, and overshoots by up to one of its steps).
Conditions are interleaved per trial (the machine's drift cancels in the ratios), in
blocks. Prints per block the mean ms of each, the median ratio over blocks of each
condition to ``b2b`` with its range, and the median waits; ``--out FILE`` writes them.

    ../shared/tools/quiet run python -m experiments.bench_after_recv --model resnet20 --batch-size 16
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.block_ratios import print_ratios, ratios_to, save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import nonneg_float, positive_int
from stalesim.schedule.actions import Kind

CONDITIONS = ("b2b", "sleep", "sleep+busy", "recv+busy", "recv-tiny+busy")
DURING = ("idle", "busy")
#: what the measured rank times: a forward and a backward of the whole model
TIMED = (Kind.F.value, Kind.B.value)
#: the tag of a trial's message
MESSAGE = 3
#: the shared state's slots: the trial rank 1 waits in, when it started waiting, the last
#: trial rank 0 stopped computing for, the end
ARMED, SINCE, STOPPED, END = 0, 1, 2, 3


def _trials(blocks: int, per_block: int) -> list[tuple[int, str, str]]:
    """``(block, condition, kind)`` in the order rank 1 runs them: per block, one warm-up
    round of every pair, then ``per_block`` rounds, conditions innermost."""
    out = []
    for b in range(blocks):
        for _ in range(per_block + 1):
            for k in TIMED:
                for c in CONDITIONS:
                    out.append((b, c, k))
    return out


def _rank(rank: int, port: int, model: str, batch_size: int, wait_s: float, blocks: int,
          per_block: int, during: str, peer_batch: int, out: str, state: Any,
          go: Any) -> None:  # pragma: no cover - a child
    """Rank 1 runs the trials; rank 0 computes as each trial asks and sends each ``recv*``
    trial's message ``wait_s`` after rank 1 started waiting. The two learn of each other's
    progress through shared memory (``state``; ``go`` wakes an idle rank 0), not through
    gloo, whose receives complete only in ``wait``: a rank 0 blocking on a control message
    would sleep and wake where the trial needs it computing."""
    import torch
    import torch.distributed as dist

    from stalesim.runtime.build import model_of
    from stalesim.runtime.tasks import loss_fn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    net = model_of(model, None, seed=rank).train()
    gen = torch.Generator().manual_seed(rank)
    x, y = net.random_batch(batch_size if rank else peer_batch, gen)
    loss_of = loss_fn(net.task)
    td = datetime.timedelta(seconds=120)
    trials = _trials(blocks, per_block)
    dist.barrier()
    if rank == 0:
        shape = (batch_size, *x.shape[1:])
        done = -1
        pending = []
        while not state[END]:
            if during == "idle":
                go.wait(1.0)  # blocked, not spinning: an idle rank
            i = int(state[ARMED])
            if i <= done or not trials[i][1].endswith("+busy"):
                if during == "busy":
                    loss_of(net(x), y).backward()
                    net.zero_grad(set_to_none=True)
                continue
            while time.perf_counter() - state[SINCE] < wait_s:
                loss_of(net(x), y).backward()
                net.zero_grad(set_to_none=True)
            if trials[i][1].startswith("recv"):
                msg = torch.randn(shape) if trials[i][1] == "recv+busy" else torch.zeros(1)
                pending.append(dist.isend(msg, dst=1, tag=MESSAGE))
            go.clear()
            done = i
            state[STOPPED] = i
        for s in pending:
            s.wait(timeout=td)
        dist.barrier()
        dist.destroy_process_group()
        return
    warm = len(TIMED) * len(CONDITIONS)  # the first round of each block
    times: dict[str, dict[str, list[tuple[int, float]]]] = {c: {k: [] for k in TIMED} for c in CONDITIONS}
    waits: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    for i, (block, cond, kind) in enumerate(trials):
        loss_of(net(x), y).backward()  # the previous action, back to back
        net.zero_grad(set_to_none=True)
        loss = loss_of(net(x), y) if kind == Kind.B.value else None
        recv = cond.startswith("recv")
        buf = (torch.empty_like(x) if cond == "recv+busy" else torch.empty(1)) if recv else None
        msg = dist.irecv(buf, src=0, tag=MESSAGE) if buf is not None else None
        t0 = time.perf_counter()
        state[SINCE] = t0
        state[ARMED] = i  # after its start: rank 0 reads them in the other order
        if cond.endswith("+busy"):
            go.set()
        if cond.startswith("sleep"):
            time.sleep(wait_s)
            while cond.endswith("+busy") and state[STOPPED] < i:  # rank 0 ends its last chunk
                time.sleep(0.0002)
        elif msg is not None:
            msg.wait(timeout=td)
        t1 = time.perf_counter()
        if kind == Kind.F.value:
            loss_of(net(buf if cond == "recv+busy" else x), y)
        else:
            loss.backward()
        t2 = time.perf_counter()
        net.zero_grad(set_to_none=True)
        if cond.endswith("+busy"):
            while state[STOPPED] < i:  # not one trial's compute in the next
                time.sleep(0.0002)
        if i % (warm * (per_block + 1)) >= warm:
            times[cond][kind].append((block, t2 - t1))
            waits[cond].append(t1 - t0)
    state[END] = 1.0
    go.set()
    dist.barrier()
    Path(out).write_text(json.dumps({"times": times, "waits": waits}))
    dist.destroy_process_group()


def run(model: str, batch_size: int, wait_s: float, blocks: int, per_block: int,
        during: str = "idle", peer_batch: int = 1) -> dict[str, Any]:
    import torch.multiprocessing as mp

    from stalesim.validate.commcal import free_port

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench_after_recv: needs two cores")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "times.json")
        ctx = mp.get_context("spawn")
        state = ctx.Array("d", [-1.0, 0.0, -1.0, 0.0], lock=False)
        mp.start_processes(_rank, args=(free_port(), model, batch_size, wait_s, blocks, per_block, during,
                                        peer_batch, out, state, ctx.Event()),
                           nprocs=2, start_method="spawn")
        got = json.loads(Path(out).read_text())
    rows = []
    for b in range(blocks):
        rows.append({c: {k: statistics.fmean(t for blk, t in got["times"][c][k] if blk == b) for k in TIMED}
                     for c in CONDITIONS})
    ratios = ratios_to(rows, CONDITIONS[0], TIMED)
    waits = {c: statistics.median(v) for c, v in got["waits"].items()}
    return {"model": model, "batch_size": batch_size, "wait_s": wait_s, "during": during,
            "peer_batch": peer_batch, "blocks": rows, "ratios": ratios, "median_wait_s": waits}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="resnet20")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--wait-ms", type=nonneg_float, default=25.0)
    p.add_argument("--blocks", type=positive_int, default=6)
    p.add_argument("--per-block", type=positive_int, default=6, help="timed trials per condition, kind and block")
    p.add_argument("--during", choices=DURING, default="idle",
                   help="what rank 0 does while rank 1's timed action runs")
    p.add_argument("--peer-batch", type=positive_int, default=1, help="the batch of rank 0's steps")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    res = run(a.model, a.batch_size, a.wait_ms / 1e3, a.blocks, a.per_block, a.during, a.peer_batch)
    for b, row in enumerate(res["blocks"]):
        print(f"block {b}: " + "  ".join(f"{c} F {row[c]['F'] * 1e3:.2f} B {row[c]['B'] * 1e3:.2f} ms"
                                         for c in CONDITIONS))
    print_ratios(res["ratios"], CONDITIONS[0])
    print("median waits: " + "  ".join(f"{c} {w * 1e3:.1f} ms" for c, w in res["median_wait_s"].items()))
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
