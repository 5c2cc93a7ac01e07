"""Data-parallel schedules over P workers: dp (synchronous) and pipe-sgd.

Each worker holds all S stages on its own device and runs them in sequence;
the gradient of every stage is all-reduced across workers (one bucket per
stage, started right after that stage's backward so it overlaps the rest of
the backward, as DDP does). Pipe-SGD's synchronous warm-up is the generic
warm-up phase (``dp`` for the first K batches, :mod:`stalesim.schedule.transforms`).
"""

from __future__ import annotations

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.ir import ScheduleConfig
from stalesim.schedule.orders import forward

PerDevice = list[list[Action]]


def _compute(S: int, t: int, r: int, allreduce: bool) -> list[Action]:
    """Forward through all stages, loss, backward with an AR start after each stage."""
    acts: list[Action] = []
    for s in range(S):
        acts.extend(forward(s, t, None, s == S - 1, r))
    for s in reversed(range(S)):
        acts.append(act(Kind.B, s, t, None, r))
        if allreduce:
            acts.append(act(Kind.AR, s, t, None, r))
    return acts


def _finish(S: int, t: int, r: int, allreduce: bool) -> list[Action]:
    """Wait for batch t's all-reduces and apply its update, stage by stage."""
    acts: list[Action] = []
    for s in reversed(range(S)):
        if allreduce:
            acts.append(act(Kind.ARW, s, t, None, r))
        acts.append(act(Kind.U, s, t, None, r))
    return acts


def dp(cfg: ScheduleConfig) -> PerDevice:
    """Synchronous data parallelism with ring all-reduce: staleness 0."""
    S, P = cfg.stages, cfg.workers
    ar = P > 1
    lists: PerDevice = []
    for r in range(P):
        acts: list[Action] = []
        for t in range(cfg.batches or 0):
            acts += _compute(S, t, r, ar) + _finish(S, t, r, ar)
        lists.append(acts)
    return lists


def pipe_sgd(cfg: ScheduleConfig) -> PerDevice:
    """Pipe-SGD (Li et al.): width-2 pipeline of compute and all-reduce.

    The all-reduce of step t overlaps the compute of step t + 1, and its update is
    applied after that compute: w(t+1) = w(t) - lr * g(w(t-1)), staleness 1.
    """
    S, P, N = cfg.stages, cfg.workers, cfg.batches or 0
    ar = P > 1
    lists: PerDevice = []
    for r in range(P):
        acts: list[Action] = []
        for t in range(N):
            acts += _compute(S, t, r, ar)
            if t >= 1:
                acts += _finish(S, t - 1, r, ar)
        if N:
            acts += _finish(S, N - 1, r, ar)
        lists.append(acts)
    return lists
