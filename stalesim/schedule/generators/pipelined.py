"""Pipeline schedules over S stages: sequential, gpipe, 1f1b, pipedream, 2bw.

Each generator returns one action list per stage (device s runs stage s);
:func:`stalesim.schedule.build_schedule` lowers and annotates it. The weight
policy of each schedule is a fact of its spec (:mod:`stalesim.schedule.registry`).
"""

from __future__ import annotations

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.ir import ScheduleConfig
from stalesim.schedule.orders import forward, one_f_one_b, sequential_batch

PerStage = list[list[Action]]


def _n(cfg: ScheduleConfig) -> int:
    return cfg.batches or 0


def sequential(cfg: ScheduleConfig) -> PerStage:
    """One batch at a time through all stages and back (naive model parallelism)."""
    per_stage: PerStage = [[] for _ in range(cfg.stages)]
    for t in range(_n(cfg)):
        for s, acts in enumerate(sequential_batch(cfg.stages, t)):
            per_stage[s].extend(acts)
    return per_stage


def gpipe(cfg: ScheduleConfig) -> PerStage:
    """GPipe: all M micro-batch forwards, then all backwards, flush, update."""
    S, M = cfg.stages, cfg.microbatches
    per_stage: PerStage = [[] for _ in range(S)]
    for t in range(_n(cfg)):
        for s in range(S):
            acts = per_stage[s]
            for m in range(M):
                acts.extend(forward(s, t, m, s == S - 1))
            for m in range(M):
                acts.append(act(Kind.B, s, t, m))
            acts.append(act(Kind.U, s, t))
    return per_stage


def one_f_one_b_flush(cfg: ScheduleConfig) -> PerStage:
    """PipeDream-flush: 1F1B over the M micro-batches of a batch, flush, update."""
    S, M = cfg.stages, cfg.microbatches
    per_stage: PerStage = [[] for _ in range(S)]
    for t in range(_n(cfg)):
        for s in range(S):
            acts = per_stage[s]
            for kind, m in one_f_one_b(M, S - 1 - s):
                if kind is Kind.F:
                    acts.extend(forward(s, t, m, s == S - 1))
                else:
                    acts.append(act(Kind.B, s, t, m))
            acts.append(act(Kind.U, s, t))
    return per_stage


def pipedream(cfg: ScheduleConfig) -> PerStage:
    """PipeDream: asynchronous 1F1B over whole batches, update after each backward,
    weight stashing (the backward reads the version its forward read)."""
    S, N = cfg.stages, _n(cfg)
    per_stage: PerStage = [[] for _ in range(S)]
    for s in range(S):
        acts = per_stage[s]
        for kind, t in one_f_one_b(N, S - 1 - s):
            if kind is Kind.F:
                acts.extend(forward(s, t, None, s == S - 1))
            else:
                acts.append(act(Kind.B, s, t))
                acts.append(act(Kind.U, s, t))
    return per_stage


def two_bw(cfg: ScheduleConfig) -> PerStage:
    """PipeDream-2BW: asynchronous 1F1B over the stream of micro-batches, no flush.

    Batch t's gradient (accumulated over its M micro-batches) is applied just
    before the first forward of batch t + 2, so every forward of batch t + 1
    reads the version produced by the update of batch t - 1:
    W(t+1) = W(t) - lr * grad(W(t-1)), staleness 1 at every stage, and at most two
    versions alive per stage (double buffering). Needs M >= S - 1, otherwise the
    backwards of batch t have not finished when batch t + 2 starts.
    """
    S, M, N = cfg.stages, cfg.microbatches, _n(cfg)
    per_stage: PerStage = [[] for _ in range(S)]
    for s in range(S):
        acts = per_stage[s]
        updated = 0  # batches whose update has been placed
        for kind, k in one_f_one_b(N * M, S - 1 - s):
            t, m = divmod(k, M)
            if kind is Kind.F:
                if m == 0 and t >= 2:
                    acts.append(act(Kind.U, s, t - 2))
                    updated = t - 1
                acts.extend(forward(s, t, m, s == S - 1))
            else:
                acts.append(act(Kind.B, s, t, m))
        for t in range(updated, N):
            acts.append(act(Kind.U, s, t))
    return per_stage
