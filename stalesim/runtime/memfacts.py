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


def stage_memory_facts(cfg: Any, sched: Any, *, ppv: list[int] | None = None,
                       device: torch.device | str = "cpu") -> list[dict[str, int]]:
    """Per stage, the bytes the memory model needs, measured as the executor counts them:
    ``params``, ``buffers``, ``activation`` (one in-flight action batch: input, output,
    saved tensors, loss on a loss stage), ``deferred_w`` (on a stage that splits its
    backward: what a deferred ``W`` keeps after its ``I``, the gradients at the stage's
    module outputs and the output gradient) and ``message`` (the output of one action batch).

    Builds the run's model and stages (:func:`stalesim.runtime.build.build_stage_modules`)
    and runs one forward (and the loss) per stage through :class:`StageRuntime` at the
    schedule's action batch, without training anything, on ``device``: the CPU by default;
    for a GPU prediction on the GPU, whose kernels may save other tensors than the CPU's
    (cuDNN's batch norm keeps a reserve buffer). The bytes inside actions and the CUDA
    allocator's own are :func:`stage_cuda_extra_bytes`'s.
    """
    from dataclasses import replace

    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.schedule import Action, Kind

    if ppv is not None:
        cfg = replace(cfg, ppv=list(ppv), stages=None)
    mods = build_stage_modules(cfg, sched)
    B = sched.action_batch_size(cfg.batch_size)
    # drawn before the stages move to ``device`` (random_batch may run the whole model once)
    x, y = mods.model.random_batch(B, torch.Generator().manual_seed(0), cfg.torch_dtype)
    rts = stage_runtimes(cfg, sched, mods, worker=0, stages=range(sched.stages), device=device,
                         total=max(1, sched.batches))
    x, y = x.to(device), y.to(device)
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
        # the state the stage's optimizer holds after its first update, as the executor counts it
        out.append({"params": st["params"], "buffers": st["buffers"], "optimizer": rt.opt.state_nbytes(),
                    "activation": sum(rec.storages.values()), "deferred_w": deferred,
                    "message": 0 if s == sched.stages - 1 else storage_nbytes(yout)})
        rt.inflight.clear()
        x = yout.detach().clone()  # the next rank receives it into a buffer of its own
    return out


def stage_cuda_extra_bytes(cfg: Any, sched: Any, *, device: torch.device | str = "cpu",
                           ppv: list[int] | None = None) -> list[int]:
    """Per stage, the CUDA bytes the memory model does not count: 0 on the CPU.

    The model counts what a rank holds *between* actions (what
    :mod:`stalesim.runtime.memory` counts, exact on the CPU). A CUDA device also holds,
    at its peak, what exists only *inside* an action (the gradients of intermediate
    activations during a backward, cuDNN's convolution workspace, the optimizer's
    temporaries) and allocations no tensor of the run owns (cuBLAS's workspace, kept per
    handle and stream; the allocator's rounding of every block to 512 bytes). Measured once
    per stage, on ``device``, with the run's model and stages at the schedule's action batch:

    * every stage runs one training step (F, LOSS, B, the optimizer step) as warm-up, so
      optimizer state and library workspaces exist; what the allocator then holds beyond
      the parameters, buffers and optimizer state the model counts (and the inputs held
      here) is the persistent part, common to the stages of one process;
    * each stage runs a second step under ``torch.cuda.max_memory_allocated`` (reset just
      before): its peak minus the largest allocation at an action boundary is the
      transient part of that stage.

    Entry s is transient(s) + persistent. A device runs one action at a time, so the
    model adds, per device, the largest entry of its stages
    (:func:`stalesim.sim.memory.memory_report`'s ``transient_bytes``).
    """
    from dataclasses import replace

    from stalesim.runtime.build import build_stage_modules, stage_runtimes
    from stalesim.runtime.optim import state_copies
    from stalesim.schedule import Action, Kind

    dev = torch.device(device)
    if dev.type != "cuda":
        return [0] * sched.stages
    if ppv is not None:
        cfg = replace(cfg, ppv=list(ppv), stages=None)
    mods = build_stage_modules(cfg, sched)  # on the CPU: the sample batch runs the whole model
    B = sched.action_batch_size(cfg.batch_size)
    x0, y0 = mods.model.random_batch(B, torch.Generator().manual_seed(0), cfg.torch_dtype)
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    rts = stage_runtimes(cfg, sched, mods, worker=0, stages=range(sched.stages), device=dev,
                         total=max(1, sched.batches))
    labels = y0.to(dev)
    xs: list[torch.Tensor] = []  # each stage's input (one forward of the stages before it)
    x = x0.to(dev)
    with torch.no_grad():
        for s in range(sched.stages):
            xs.append(x)
            x = rts[s].module(x)
    del x
    m = 0 if sched.uses_micro else None

    def step(s: int, t: int) -> int:
        """One training step of stage s; the largest allocation at an action boundary."""
        rt = rts[s]
        alloc = [torch.cuda.memory_allocated(dev)]
        xin = xs[s].detach()
        if s > 0 and not sched.local_loss:
            xin.requires_grad_(True)
        out = rt.forward(Action(Kind.F, s, t, m, 0), xin)
        alloc.append(torch.cuda.memory_allocated(dev))
        if rt.is_loss_stage:
            rt.loss(Action(Kind.LOSS, s, t, m, 0), labels)
        gy = None if rt.is_loss_stage else torch.ones_like(out)
        del out
        alloc.append(torch.cuda.memory_allocated(dev))
        rt.backward(Action(Kind.B, s, t, m, 0), gy)
        del gy
        alloc.append(torch.cuda.memory_allocated(dev))
        grads = rt.grads(t)
        del rt.buffers[t]
        rt.opt.step(grads, rt.lr_for(t))
        del grads
        alloc.append(torch.cuda.memory_allocated(dev))
        return max(alloc)

    for s in range(sched.stages):
        step(s, 0)
    static = 0
    for s in range(sched.stages):
        st = module_static_bytes([rts[s].module, rts[s].head], momentum=False)
        exact = cfg.optimizer == "muon" or cfg.basis_rotation  # state not a multiple of the parameters
        state = rts[s].opt.state_nbytes() if exact else st["params"] * state_copies(cfg)
        static += st["params"] + state + st["buffers"]  # Muon: one tensor per matrix; rotation: + factors
    held: dict[int, int] = {}
    for t in [*xs, labels]:
        held[int(t.untyped_storage().data_ptr())] = storage_nbytes(t)
    persistent = max(0, torch.cuda.memory_allocated(dev) - base - static - sum(held.values()))
    out: list[int] = []
    for s in range(sched.stages):
        torch.cuda.reset_peak_memory_stats(dev)
        top = step(s, 1)
        out.append(max(0, int(torch.cuda.max_memory_allocated(dev)) - top) + persistent)
    return out

