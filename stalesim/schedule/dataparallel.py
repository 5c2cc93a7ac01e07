"""Data-parallel schedules over P workers: dp (synchronous) and pipe-sgd.

Each worker holds all S stages on its own device and runs them in sequence;
the gradient of every stage is all-reduced across workers (one bucket per
stage, started right after that stage's backward so it overlaps the rest of
the backward, as DDP does).
"""

from __future__ import annotations

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.ir import Policy, ScheduleConfig
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


def dp(cfg: ScheduleConfig) -> tuple[PerDevice, Policy, dict]:
    """Synchronous data parallelism with ring all-reduce: staleness 0."""
    S, P = cfg.stages, cfg.workers
    ar = P > 1
    lists: PerDevice = []
    for r in range(P):
        acts: list[Action] = []
        for t in range(cfg.batches):
            acts += _compute(S, t, r, ar) + _finish(S, t, r, ar)
        lists.append(acts)
    return lists, Policy.LATEST, {}


def pipe_sgd(cfg: ScheduleConfig) -> tuple[PerDevice, Policy, dict]:
    """Pipe-SGD (Li et al.): width-2 pipeline of compute and all-reduce.

    The all-reduce of step t overlaps the compute of step t + 1, and its update is
    applied after that compute: w(t+1) = w(t) - lr * g(w(t-1)), staleness 1. The
    first ``warmup`` steps are synchronous (staleness 0).
    """
    S, P, W = cfg.stages, cfg.workers, cfg.warmup
    ar = P > 1
    lists: PerDevice = []
    for r in range(P):
        acts: list[Action] = []
        for t in range(cfg.batches):
            acts += _compute(S, t, r, ar)
            if t < W:
                acts += _finish(S, t, r, ar)
            elif t - 1 >= W:
                acts += _finish(S, t - 1, r, ar)
        if cfg.batches - 1 >= W:
            acts += _finish(S, cfg.batches - 1, r, ar)
        lists.append(acts)
    return lists, Policy.LATEST, {"warmup": W}
