"""Schedules with virtual stages: V model chunks per device (S = R devices x V).

Each generator returns one action list per device (R = S / V); the placement
(:mod:`stalesim.schedule.placement`, ``loop`` here: stage s on device s mod R)
is a fact of the schedule's spec, applied by ``build_schedule``.

* ``interleaved-1f1b`` (Narayanan et al., SC'21, Megatron-LM): per flushed batch,
  each device runs :func:`~stalesim.schedule.orders.interleaved` over its V
  chunks: warm-up ``(V-1) g + 2 (R-1-r)`` forwards, then one forward and one
  backward alternate; micro-batches visit the chunks in rounds of g = R (depth
  first). Bubble (R-1)/(V M) of the work, 1/V of 1F1B's.
* ``looped-bfs`` (Lamy-Poirier, Breadth-First Pipeline Parallelism, MLSys'23):
  each device runs all M forwards of its chunk 0, then of chunk 1, ... (breadth
  first: the earliest chunk first), then the backwards chunk by chunk in reverse,
  micro-batches last-in first-out. GPipe's memory (M in flight per chunk), a
  smaller bubble than GPipe's.
* ``interleaved-pipedream`` and ``interleaved-2bw``: the asynchronous variants.
  The interleaved order runs over the stream of all batches' micro-batches with
  no flush (as PipeDream and 2BW run 1F1B). ``interleaved-pipedream`` applies a
  chunk's update right after its last backward of the batch, with weight
  stashing (each backward reads its forward's version); ``interleaved-2bw``
  places the update of batch t just before the chunk's first forward of batch
  t + 2 (double buffering: W(t+1) = W(t) - lr grad(W(t-1))). Their staleness is
  derived by the version pass, never typed in.
"""

from __future__ import annotations

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.ir import ScheduleConfig
from stalesim.schedule.orders import forward, interleaved, rounds_group
from stalesim.schedule.placement import chunks_of

PerDevice = list[list[Action]]


def _shape(cfg: ScheduleConfig, placement: str = "loop") -> tuple[int, int, int, list[list[int]]]:
    S = cfg.stages
    V = cfg.stages_per_device or 1
    return S, V, S // V, chunks_of(placement, S, V)


def emit(acts: list[Action], kind: Kind, stage: int, batch: int, micro: int | None, stages: int) -> None:
    """Append one compute action (a forward brings its LOSS on the last stage)."""
    if kind is Kind.F:
        acts.extend(forward(stage, batch, micro, stage == stages - 1))
    else:
        acts.append(act(kind, stage, batch, micro))


def interleaved_1f1b(cfg: ScheduleConfig) -> PerDevice:
    """Megatron's interleaved 1F1B, flushed per batch, then each chunk's update."""
    S, V, R, chunks = _shape(cfg)
    M = cfg.microbatches
    g = rounds_group(M, R)
    lists: PerDevice = [[] for _ in range(R)]
    for t in range(cfg.batches or 0):
        for r in range(R):
            for kind, c, m in interleaved(M, V, R, r, group=g):
                emit(lists[r], kind, chunks[r][c], t, m, S)
            lists[r].extend(act(Kind.U, s, t) for s in chunks[r])
    return lists


def looped_bfs(cfg: ScheduleConfig) -> PerDevice:
    """Breadth-first looping: all forwards chunk by chunk, backwards in reverse."""
    S, V, R, chunks = _shape(cfg)
    M = cfg.microbatches
    lists: PerDevice = [[] for _ in range(R)]
    for t in range(cfg.batches or 0):
        for r in range(R):
            acts = lists[r]
            for s in chunks[r]:
                for m in range(M):
                    emit(acts, Kind.F, s, t, m, S)
            for s in reversed(chunks[r]):
                for m in reversed(range(M)):
                    acts.append(act(Kind.B, s, t, m))
            acts.extend(act(Kind.U, s, t) for s in chunks[r])
    return lists


def _stream(cfg: ScheduleConfig) -> tuple[int, int, int, int, list[list[int]], list[list[tuple[Kind, int, int]]]]:
    """The interleaved order over the stream of N x M micro-batches, per device, in
    rounds of R (:func:`~stalesim.schedule.orders.interleaved` pads the last round)."""
    S, V, R, chunks = _shape(cfg)
    M, N = cfg.microbatches, cfg.batches or 0
    orders = [interleaved(N * M, V, R, r, group=R) for r in range(R)]
    return S, M, N, R, chunks, orders


def interleaved_pipedream(cfg: ScheduleConfig) -> PerDevice:
    """Asynchronous interleaved 1F1B, update after each chunk's last backward of a batch
    (policy ``stash``: the backward reads its forward's weights)."""
    S, M, N, R, chunks, orders = _stream(cfg)
    lists: PerDevice = [[] for _ in range(R)]
    for r in range(R):
        for kind, c, item in orders[r]:
            t, m = divmod(item, M)
            s = chunks[r][c]
            emit(lists[r], kind, s, t, m, S)
            if kind is Kind.B and m == M - 1:
                lists[r].append(act(Kind.U, s, t))
    return lists


def interleaved_2bw(cfg: ScheduleConfig) -> PerDevice:
    """Asynchronous interleaved 1F1B with 2BW's update placement (policy ``double-buffer``)."""
    S, M, N, R, chunks, orders = _stream(cfg)
    lists: PerDevice = [[] for _ in range(R)]
    for r in range(R):
        acts = lists[r]
        placed = {s: 0 for s in chunks[r]}  # per stage: batches whose update is placed
        for kind, c, item in orders[r]:
            t, m = divmod(item, M)
            s = chunks[r][c]
            if kind is Kind.F and m == 0 and t >= 2:
                acts.append(act(Kind.U, s, t - 2))
                placed[s] = t - 1
            emit(acts, kind, s, t, m, S)
        for s in chunks[r]:
            acts.extend(act(Kind.U, s, t) for t in range(placed[s], N))
    return lists
