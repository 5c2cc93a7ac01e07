"""Tiny single-worker replay used by the runtime tests (the emulator does the same, fuller)."""

from __future__ import annotations

import torch
from torch import nn

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Kind, dry_run


def mlp_stages(S: int, seed: int = 0, width: int = 5) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()).double() for _ in range(S)]


def replay(name: str, S: int, N: int, M: int = 1, lr: float = 0.1, sched=None, on_update=None, **kw):
    """Replay dry_run order on an S-stage tanh MLP; ``on_update(rt, action)`` runs before each U."""
    from stalesim.schedule import build_schedule

    cfg = TrainConfig(schedule=name, stages=S, iterations=N, microbatches=M, lr=lr, momentum=0.5,
                      dtype="float64", batch_size=4 * M, **kw)
    if sched is None:
        sched = build_schedule(cfg.schedule_config(N))
    mods = mlp_stages(S)
    rts = [StageRuntime(m, stage=s, num_stages=S, schedule=sched, cfg=cfg) for s, m in enumerate(mods)]
    g = torch.Generator().manual_seed(1)
    data = {t: (torch.randn(4 * M, 5, generator=g, dtype=torch.float64),
                torch.randint(0, 5, (4 * M,), generator=g)) for t in range(N)}
    acts, grads, losses = {}, {}, []
    for step in dry_run(sched):
        a = step.action
        s, t, m = a.stage, a.batch, a.micro
        mi = 0 if m is None else m
        x, y = data[t]
        x, y = x[mi * 4:(mi + 1) * 4], y[mi * 4:(mi + 1) * 4]
        if a.kind is Kind.F:
            inp = x if s == 0 else acts.pop((s, t, m)).detach().requires_grad_(True)
            out = rts[s].forward(a, inp)
            if s + 1 < S:
                acts[(s + 1, t, m)] = out
        elif a.kind is Kind.LOSS:
            losses.append(float(rts[s].loss(a, y)))
        elif a.kind is Kind.B or a.kind is Kind.I:
            run = rts[s].backward if a.kind is Kind.B else rts[s].backward_input
            gx = run(a, grads.pop((s, t, m), None))
            if s > 0:
                grads[(s - 1, t, m)] = gx
        elif a.kind is Kind.W:
            rts[s].backward_weight(a)
        elif a.kind is Kind.U:
            if on_update is not None:
                on_update(rts[s], a)
            rts[s].update(a)
    return sched, rts, losses


