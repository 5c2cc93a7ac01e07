"""Per-stage memory facts measured as the executor counts them (:mod:`stalesim.runtime.memory`).

The memory model (:mod:`stalesim.sim.memory`) multiplies per-stage bytes by the
liveness counts of a schedule. For its total to be the executor's, those bytes
must be measured with the executor's own code and definition: this module runs
one forward (and loss) per stage through :class:`StageRuntime` and reads the
bytes its record keeps (input, output, saved tensors, by unique storage).
"""

from __future__ import annotations

from typing import Any

import torch

from stalesim.runtime.memory import module_static_bytes, storage_nbytes


def stage_memory_facts(cfg: Any, sched: Any, *, ppv: list[int] | None = None) -> list[dict[str, int]]:
    """Per stage, the bytes the memory model needs, measured as the executor counts them:
    ``params``, ``buffers``, ``activation`` (one in-flight action batch: input, output,
    saved tensors, loss on a loss stage), ``deferred_w`` (on a stage that splits its
    backward: what a deferred ``W`` keeps after its ``I``, the gradients at the stage's
    module outputs and the output gradient) and ``message`` (the output of one action batch).

    Builds the run's model and stages (:func:`stalesim.runtime.build.build_stage_modules`)
    and runs one forward (and the loss) per stage through :class:`StageRuntime` at the
    schedule's action batch, on the CPU, without training anything.
    """
    from dataclasses import replace

    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.schedule import Action, Kind

    if ppv is not None:
        cfg = replace(cfg, ppv=list(ppv), stages=None)
    mods = build_stage_modules(cfg, sched)
    B = sched.action_batch_size(cfg.batch_size)
    rts = stage_runtimes(cfg, sched, mods, worker=0, stages=range(sched.stages), device="cpu",
                         total=max(1, sched.batches))
    x, y = mods.model.random_batch(B, torch.Generator().manual_seed(0), cfg.torch_dtype)
    out: list[dict[str, int]] = []
    for s in range(sched.stages):
        rt = rts[s]
        a = Action(Kind.F, s, 0, 0 if sched.uses_micro else None, 0)
        xin = x.detach()
        if s > 0 and not sched.local_loss:
            xin.requires_grad_(True)
        yout = rt.forward(a, xin)
        if rt.is_loss_stage:
            rt.loss(Action(Kind.LOSS, s, 0, a.micro, 0), y)
        rec = rt.inflight[(0, a.micro)]
        st = module_static_bytes([rt.module, rt.head], momentum=bool(cfg.momentum))
        deferred = 0
        if rt.split:  # what a deferred W keeps beyond the record: the gradients it reads
            gy = None if rt.is_loss_stage else torch.ones_like(yout)
            rt.backward_input(Action(Kind.I, s, 0, a.micro, 0), gy)
            dw: dict[int, int] = {}
            for t in [*(rec.seg_grads or ()), rec.extra.get("grad_out")]:
                if t is not None and int(t.untyped_storage().data_ptr()) not in rec.storages:
                    dw[int(t.untyped_storage().data_ptr())] = storage_nbytes(t)
            deferred = sum(dw.values())
            rt.deferred.clear()
        out.append({"params": st["params"], "buffers": st["buffers"], "optimizer": st["optimizer"],
                    "activation": sum(rec.storages.values()), "deferred_w": deferred,
                    "message": 0 if s == sched.stages - 1 else storage_nbytes(yout)})
        rt.inflight.clear()
        x = yout.detach().clone()  # the next rank receives it into a buffer of its own
    return out

