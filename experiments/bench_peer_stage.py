"""Does a stage cost more as a rank of a real 2-rank group, beside the other rank's stage,
than as ``validate``'s stage timing measures it (a fresh process timing every stage, alone
or beside a co-runner that trains the whole model)?

Measured runs of the char-GPT computed 5-20% over their stages' times on every schedule,
``sequential`` included, while the replay held (docs/validate.md). Two differences between
the timing and a run were named and never measured: a rank lives in a gloo process group,
and the other rank computes *its* stage, not the whole model. Here two gloo ranks each own
one stage of ``--schedule``'s layout (rank r stage r; two stages) and, in blocks whose
condition order alternates, each block times:

* ``fresh``: the stage timing itself (:func:`stalesim.validate.stagetime._sample_fresh`, a
  new process timing every stage) while both ranks block in a barrier;
* ``fresh+co``: the same with a co-runner training the whole model, as ``validate``'s
  contended stage times;
* ``solo``: each rank in turn times its own stage's rounds while the other blocks in a
  barrier (the process group, no one else computing);
* ``peer``: both ranks time their own stage's rounds at once (the other rank computes the
  other stage, as in a pipeline whose ranks overlap), no messages;
* ``peer+msgs``: the same, and each rank sends the other a message of its activation's size
  after every F and every B (each round's receives posted before it, all waited on after it,
  outside the timed actions): what receiving and sending cost a rank's compute while the
  messages arrive, with no wait for them;
* ``alt``: the ranks take turns as ``sequential``'s do: rank 0's F, its activation sent, rank
  1's F, LOSS and B, its gradient sent back, rank 0's B; each rank blocks in gloo's wait for
  the other's message while the other computes (no two compute at once, as in ``solo``);
* ``alt-spin``: the same, each rank spinning on a shared counter the other sets just before
  it sends, then waiting on the (arrived) message, so that its core never goes idle (gloo's
  receive completes only inside ``wait``: polling ``is_completed`` never sees it done).

A round is the stage's F (on a fresh copy of the input it receives), its LOSS on the last
stage, and its B (on a fresh copy of a gradient of its output's shape), as the stage timing
runs them; every condition's first :data:`WARMUP` rounds are left out, as the stage timing
leaves out its process's first (a rank that sat in a barrier for seconds starts cold; each
round's times are kept in ``rounds_s``). Per block and condition the mean ms of F and B per
stage; the median ratios over blocks (:data:`RATIOS`) with their range; ``--out`` writes
all of it as JSON.

    ../shared/tools/quiet run python -m experiments.bench_peer_stage \\
        --model gpt-char:n_layer=4,n_embd=64,n_head=4,block_size=64 --batch-size 32 --schedule gpipe
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from experiments.block_ratios import save_json
from experiments.cli_types import zoo_model
from stalesim.cli.common import int_type, positive_int
from stalesim.schedule.actions import Kind

#: the stage timing's own processes (rank 0 starts them while both ranks block in a barrier)
FRESH = ("fresh", "fresh+co")
#: timed by the ranks themselves
IN_RANKS = ("solo", "peer", "peer+msgs", "alt", "alt-spin")
#: the longest an alt-spin rank spins for the other's message before it gives up
SPIN_TIMEOUT_S = 120.0
CONDITIONS = FRESH + IN_RANKS
#: (condition, baseline) pairs whose per-block ratios are summarized
RATIOS = (("solo", "fresh"), ("peer", "fresh+co"), ("peer", "solo"), ("fresh+co", "fresh"),
          ("peer+msgs", "peer"), ("alt", "solo"), ("alt-spin", "solo"))
TIMED = (Kind.F.value, Kind.B.value)
RANKS = 2
WARMUP = 2


def _train_config(a: SimpleNamespace) -> Any:
    from stalesim.validate.steps import train_config

    return train_config(a, a.schedule, RANKS, list(a.ppv), a.iterations)


def _stage_io(tc: Any, rank: int, rounds: int) -> tuple[Any, Any, Any, Any, Any]:
    """Rank ``rank``'s stage runtimes (every stage built, as the stage timing builds them), its
    stage's input, the gradient of its output (None on the loss stage), the labels, and the
    activation between the two stages (the size of every message the ranks exchange)."""
    import torch

    from stalesim.runtime.build import build_stage_modules, model_of, stage_runtimes
    from stalesim.schedule import build_schedule

    sched = build_schedule(tc.schedule_config(rounds))
    mods = build_stage_modules(tc, sched, model=model_of(tc.model, tc.dataset, seed=tc.seed))
    rts = stage_runtimes(tc, sched, mods, worker=0, stages=range(sched.stages), device="cpu", total=rounds)
    ab = sched.action_batch_size(tc.batch_size)
    x, y = mods.model.random_batch(ab, torch.Generator().manual_seed(0), tc.torch_dtype)
    with torch.no_grad():
        h = x
        for s in range(rank):
            h = mods.stages[s](h)
        out = mods.stages[rank](h)
    g = None if rts[rank].is_loss_stage else torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return rts, h.detach(), g, y, (h if rank > 0 else out).detach()


def _rounds(rt: Any, x: Any, g: Any, y: Any, n: int, first: int,
            message: Any = None) -> dict[str, list[float]]:
    """``n`` timed rounds of one stage (batches ``first``...): per kind, seconds of each. With
    ``message`` (a tensor), the round's two messages from the other rank are posted before it
    and one of ``message``'s size is sent to it after each F and B, all waited on after it."""
    import torch.distributed as dist

    from stalesim.schedule import Action

    micro = 0 if rt.schedule.uses_micro else None
    got: dict[str, list[float]] = {k: [] for k in TIMED}
    peer = 1 - dist.get_rank() if message is not None else None
    for t in range(first, first + n):
        works = [] if peer is None else [dist.irecv(message.clone(), peer, tag=2 * t + i) for i in range(2)]
        _forward(rt, x, t, micro, got)
        if peer is not None:
            works.append(dist.isend(message, peer, tag=2 * t))
        if rt.is_loss_stage:
            rt.loss(Action(Kind.LOSS, rt.stage, t, micro), y)
        _backward(rt, g, t, micro, got)
        if peer is not None:
            works.append(dist.isend(message, peer, tag=2 * t + 1))
        for w in works:
            w.wait()
    return got


def _forward(rt: Any, x: Any, t: int, micro: int | None, got: dict[str, list[float]]) -> None:
    """F of batch ``t`` on a fresh copy of the stage's input (a leaf needing its gradient past
    stage 0, as a received activation is), its seconds appended to ``got["F"]``."""
    import time

    from stalesim.schedule import Action, Kind

    xin = x.clone()
    if rt.stage > 0:
        xin.requires_grad_(True)
    t0 = time.perf_counter()
    rt.forward(Action(Kind.F, rt.stage, t, micro), xin)
    got["F"].append(time.perf_counter() - t0)


def _backward(rt: Any, g: Any, t: int, micro: int | None, got: dict[str, list[float]]) -> None:
    """B of batch ``t`` on a fresh copy of the output gradient (None: from the loss), its
    seconds appended to ``got["B"]``; the weight gradients dropped, as a round's end does."""
    import time

    from stalesim.schedule import Action, Kind

    t0 = time.perf_counter()
    rt.backward(Action(Kind.B, rt.stage, t, micro), None if g is None else g.clone())
    got["B"].append(time.perf_counter() - t0)
    rt.buffers.clear()


def _alternate(rt: Any, x: Any, g: Any, y: Any, n: int, first: int, message: Any, *,
               sent: Any = None, seen: list[int] | None = None) -> dict[str, list[float]]:
    """``n`` rounds in turns (``alt``): stage 0's F, a message to rank 1, stage 1's F, LOSS and
    B, a message back, stage 0's B. With ``sent`` (a shared array: per rank, how many messages
    it has started to send) a rank spins until the other's count passes ``seen[0]``, the
    messages it has received from the other so far over every call (kept by the caller: read
    from ``sent`` at the start of a call instead, the count raced the peer's first send and a
    rank that read it one late spun forever)."""
    import torch.distributed as dist

    from stalesim.schedule import Action

    me = dist.get_rank()
    peer = 1 - me

    def send(tag: int) -> None:
        if sent is not None:
            sent[me] += 1
        dist.isend(message, peer, tag=tag).wait()

    def recv(tag: int) -> None:
        if sent is not None and seen is not None:
            want = seen[0] + 1
            deadline = time.perf_counter() + SPIN_TIMEOUT_S
            while sent[peer] < want:
                if time.perf_counter() > deadline:  # never spin forever (a run in CI included)
                    raise RuntimeError(f"alt-spin: rank {peer}'s message {want} did not come in {SPIN_TIMEOUT_S:g} s")
            seen[0] = want
        dist.irecv(buf, peer, tag=tag).wait()

    micro = 0 if rt.schedule.uses_micro else None
    got: dict[str, list[float]] = {k: [] for k in TIMED}
    buf = message.clone()
    for t in range(first, first + n):
        if rt.stage == 0:
            _forward(rt, x, t, micro, got)
            send(2 * t)
            recv(2 * t + 1)
            _backward(rt, g, t, micro, got)
        else:
            recv(2 * t)
            _forward(rt, x, t, micro, got)
            rt.loss(Action(Kind.LOSS, rt.stage, t, micro), y)
            _backward(rt, g, t, micro, got)
            send(2 * t + 1)
    return got


def _rank(rank: int, a: SimpleNamespace, init: str, out: Any, sent: Any) -> None:  # pragma: no cover - a child
    import torch
    import torch.distributed as dist

    from stalesim.runtime.heap import keep_heap
    from stalesim.validate.corunners import CoRunners
    from stalesim.validate.stagetime import _sample_fresh
    from stalesim.validate.steps import profile_sizes

    keep_heap()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=RANKS)
    tc = _train_config(a)
    rts, x, g, y, act = _stage_io(tc, rank, a.iterations)
    rt = rts[rank]
    _rounds(rt, x, g, y, WARMUP, 0)
    t = WARMUP  # the next round's batch (each round a batch of its own, as in the stage timing)
    rows: list[dict[str, Any]] = []
    spun = [0]  # alt-spin: messages received from the other rank so far, over every block
    co_batch = profile_sizes(a.batch_size, a.microbatches, RANKS)[-1]  # as validate's co-runners
    co = CoRunners(tc.model, co_batch, 1, dataset=tc.dataset, running=False) if rank == 0 else None
    try:
        if co is not None:
            co.__enter__()
        for blk in range(a.blocks):
            order = CONDITIONS if blk % 2 == 0 else tuple(reversed(CONDITIONS))
            row: dict[str, Any] = {}
            for c in order:
                dist.barrier()
                if c in FRESH:
                    if co is not None:  # rank 1 blocks in the barrier below meanwhile
                        if c == "fresh+co":
                            co.resume()
                        samples, _ = _sample_fresh(tc, "cpu", 1, a.rounds, None, False, ranks=RANKS)
                        co.pause()
                        row[c] = [{k: statistics.fmean(v) for k, v in s.items() if k in TIMED} for s in samples]
                elif c == "solo":
                    for turn in range(RANKS):
                        if turn == rank:
                            got = _rounds(rt, x, g, y, WARMUP + a.rounds, t)
                            row[c] = {k: statistics.fmean(v[WARMUP:]) for k, v in got.items()}
                            row[c + ":rounds"] = got
                        dist.barrier()
                    t += WARMUP + a.rounds
                else:
                    got = (_alternate(rt, x, g, y, WARMUP + a.rounds, t, act,
                                      sent=sent if c == "alt-spin" else None, seen=spun)
                           if c.startswith("alt") else
                           _rounds(rt, x, g, y, WARMUP + a.rounds, t,
                                   message=act if c == "peer+msgs" else None))
                    t += WARMUP + a.rounds
                    row[c] = {k: statistics.fmean(v[WARMUP:]) for k, v in got.items()}
                    row[c + ":rounds"] = got
                dist.barrier()
            rows.append(row)
            if rank == 0:
                print(f"block {blk}: done", flush=True)
    finally:
        if co is not None:
            co.close()
        dist.destroy_process_group()
    out.put((rank, rows))


def run(a: SimpleNamespace) -> dict[str, Any]:
    """Spawn the two ranks; per block and condition, per stage ``{kind: mean seconds}``."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    sent = ctx.Array("q", RANKS, lock=False)  # alt-spin: messages each rank started to send
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/store"
        procs = [ctx.Process(target=_rank, args=(r, a, init, q, sent)) for r in range(RANKS)]
        for p in procs:
            p.start()
        got = dict(q.get(timeout=3600) for _ in procs)
        for p in procs:
            p.join()
    blocks = []
    for b in range(a.blocks):
        r0, r1 = got[0][b], got[1][b]
        blocks.append({
            "fresh": r0["fresh"], "fresh+co": r0["fresh+co"],
            **{c: [r0[c], r1[c]] for c in IN_RANKS},
            "rounds_s": {c: [r0[c + ":rounds"], r1[c + ":rounds"]] for c in IN_RANKS},
        })
    return {"blocks": blocks, "ratios": ratios(blocks)}


def ratios(blocks: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per ``cond/base`` of :data:`RATIOS` and ``kind:stage``: median, min and max over blocks."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c, base in RATIOS:
        d: dict[str, dict[str, float]] = {}
        for s in range(RANKS):
            for k in TIMED:
                r = [b[c][s][k] / b[base][s][k] for b in blocks]
                d[f"{k}:{s}"] = {"median": statistics.median(r), "min": min(r), "max": max(r)}
        out[f"{c}/{base}"] = d
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_peer_stage", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=zoo_model, default="gpt-char:n_layer=4,n_embd=64,n_head=4,block_size=64")
    p.add_argument("--dataset", default="synthetic")
    p.add_argument("--schedule", default="gpipe", help="whose two-stage layout is timed")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--microbatches", type=positive_int, default=4)
    p.add_argument("--ppv", type=int, nargs="*", default=None, help="default: the model's middle")
    p.add_argument("--blocks", type=positive_int, default=8)
    p.add_argument("--rounds", type=int_type(2), default=8, help="timed rounds per condition and block")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from stalesim.errors import StalesimError
    from stalesim.runtime.build import model_of
    from stalesim.schedule import get_spec

    try:
        spec = get_spec(args.schedule)
        if spec.data_parallel:
            raise StalesimError(f"--schedule: {args.schedule} is data-parallel (no stages to split)")
        layers = len(model_of(args.model, args.dataset).blocks)
        ppv = args.ppv if args.ppv is not None else [layers // 2]
        if len(ppv) != RANKS - 1 or not 0 < ppv[0] < layers:
            raise StalesimError(f"--ppv: one cut inside the model's {layers} layers, got {ppv}")
    except (StalesimError, KeyError, ValueError) as exc:
        print(f"bench_peer_stage: error: {exc}", file=sys.stderr)
        return 2
    a = SimpleNamespace(model=args.model, dataset=args.dataset, schedule=args.schedule, lr=0.01,
                        batch_size=args.batch_size, microbatches=args.microbatches, ppv=ppv,
                        seed=0, data_dir=None, blocks=args.blocks, rounds=args.rounds,
                        # every round of a rank a batch of its own (solo: one turn per rank)
                        iterations=WARMUP + len(IN_RANKS) * args.blocks * (WARMUP + args.rounds))
    res = run(a)
    for b, blk in enumerate(res["blocks"]):
        print(f"block {b}: " + "  ".join(
            f"{c} " + "/".join(f"{blk[c][s][k] * 1e3:.2f}" for s in range(RANKS) for k in TIMED)
            for c in CONDITIONS) + "  (ms: F0/B0/F1/B1)")
    for name, d in res["ratios"].items():
        print(f"{name}: " + "  ".join(f"{k} {v['median']:.3f} ({v['min']:.3f}-{v['max']:.3f})"
                                      for k, v in d.items()))
    if args.out:
        res["config"] = {k: getattr(a, k) for k in ("model", "dataset", "schedule", "batch_size", "microbatches",
                                                     "ppv", "blocks", "rounds")}
        res["date"] = datetime.date.today().isoformat()
        save_json(Path(args.out), res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
