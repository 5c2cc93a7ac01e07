"""Per-stage memory facts measured as the executor counts them (:mod:`stalesim.runtime.memory`).

The memory model (:mod:`stalesim.sim.memory`) multiplies per-stage bytes by the
liveness counts of a schedule. For its total to be the executor's, those bytes
must be measured with the executor's own code and definition: this module runs
one forward (and loss) per stage through :class:`StageRuntime` and reads the
bytes its record keeps (input, output, saved tensors, by unique storage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from stalesim.runtime.memory import module_static_bytes, storage_nbytes

if TYPE_CHECKING:
    from stalesim.schedule import Kind


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
    allocator's own are :func:`stage_cuda_memory_terms`'s.
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


@dataclass(frozen=True)
class CudaMemoryTerms:
    """What a CUDA device holds beyond the tensors the memory model counts between actions.

    ``transient``: per action kind (``Kind`` value) and stage, the bytes an action holds at
    its peak beyond the larger of the allocations before and after it (the gradients of
    intermediate activations and cuDNN's workspace in a backward, the optimizer's
    temporaries in an update). ``library``: bytes no tensor of the run owns, per process:
    cuBLAS's workspace, one per thread and stream that runs matrix products (torch keeps
    it until the process ends; 32 MiB each on Hopper by default, and a rank runs its
    forwards on its own thread and its backwards on autograd's device thread), and the
    allocator's rounding of the static state to 512-byte blocks."""

    transient: dict[str, list[int]]
    library: int


def stage_cuda_memory_terms(cfg: Any, sched: Any, *, device: torch.device | str = "cpu",
                            ppv: list[int] | None = None) -> CudaMemoryTerms:
    """The CUDA terms of the memory model, measured on ``device`` with the run's model and
    stages at the schedule's action batch; nothing on a CPU (its count is exact).

    cuBLAS's workspaces are freed first, so that the count does not depend on what this
    process ran before (a workspace that already exists would be missed). Every stage then
    runs one training step as warm-up (the optimizer's state and the workspaces now exist):
    what the allocator holds beyond the parameters, buffers and optimizer state (and the
    inputs held here) is ``library``. A second step measures each action: the allocator's
    peak inside it (reset just before) minus the larger of the allocations before and after
    it. A stage that splits its backward is measured as ``I`` then ``W``, as it runs.
    """
    from dataclasses import replace

    from stalesim.runtime.build import build_stage_modules, stage_runtimes

    dev = torch.device(device)
    if dev.type != "cuda":
        return CudaMemoryTerms({}, 0)
    if ppv is not None:
        cfg = replace(cfg, ppv=list(ppv), stages=None)
    mods = build_stage_modules(cfg, sched)  # on the CPU: the sample batch runs the whole model
    B = sched.action_batch_size(cfg.batch_size)
    x0, y0 = mods.model.random_batch(B, torch.Generator().manual_seed(0), cfg.torch_dtype)
    torch.cuda.synchronize(dev)
    with torch.cuda.device(dev):
        torch._C._cuda_clearCublasWorkspaces()
    base = torch.cuda.memory_allocated(dev)
    rts = stage_runtimes(cfg, sched, mods, worker=0, stages=range(sched.stages), device=dev,
                         total=max(1, sched.batches))
    labels = y0.to(dev)
    xs = _stage_inputs(rts, x0.to(dev), sched.stages)
    probe = _CudaStepProbe(dev, sched, rts, xs, labels)
    for s in range(sched.stages):
        probe.step(s, 0)
    static = 0
    for s in range(sched.stages):
        st = module_static_bytes([rts[s].module, rts[s].head], momentum=False)
        static += st["params"] + rts[s].opt.state_nbytes() + st["buffers"]
    held = {int(t.untyped_storage().data_ptr()): storage_nbytes(t) for t in [*xs, labels]}
    torch.cuda.synchronize(dev)
    library = max(0, torch.cuda.memory_allocated(dev) - base - static - sum(held.values()))
    probe.transient.clear()  # the warm-up's first actions also allocated the workspaces
    for s in range(sched.stages):
        probe.step(s, 1)
    return CudaMemoryTerms(probe.transient, int(library))


def _stage_inputs(rts: Any, x: torch.Tensor, stages: int) -> list[torch.Tensor]:
    """Each stage's input: one forward (without a graph) of the stages before it from ``x``."""
    xs: list[torch.Tensor] = []
    with torch.no_grad():
        for s in range(stages):
            xs.append(x)
            x = rts[s].module(x)
    del x
    return xs


class _CudaStepProbe:
    """Runs training steps of the stages action by action, as a rank runs them, and keeps
    each action's transient (:class:`CudaMemoryTerms`) per action kind and stage: the
    measuring half of :func:`stage_cuda_memory_terms`."""

    def __init__(self, dev: torch.device, sched: Any, rts: Any, xs: list[torch.Tensor],
                 labels: torch.Tensor) -> None:
        self.dev, self.sched, self.rts, self.xs, self.labels = dev, sched, rts, xs, labels
        self.m = 0 if sched.uses_micro else None
        self.transient: dict[str, list[int]] = {}

    def measured(self, kind: Kind, s: int, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` (one action of stage s) and keep its transient."""
        dev = self.dev
        torch.cuda.synchronize(dev)
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        out = fn(*args)
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev)
        after = torch.cuda.memory_allocated(dev)
        row = self.transient.setdefault(kind.value, [0] * self.sched.stages)
        row[s] = max(row[s], max(0, int(peak) - max(before, after)))
        return out

    def step(self, s: int, t: int) -> None:
        """One training step of stage s, action by action, as a rank runs it."""
        from stalesim.schedule import Action, Kind

        rt, m, measured = self.rts[s], self.m, self.measured
        xin = self.xs[s].detach()
        if s > 0 and not self.sched.local_loss:
            xin.requires_grad_(True)
        out = measured(Kind.F, s, rt.forward, Action(Kind.F, s, t, m, 0), xin)
        if rt.is_loss_stage:
            measured(Kind.LOSS, s, rt.loss, Action(Kind.LOSS, s, t, m, 0), self.labels)
        gy = None if rt.is_loss_stage else torch.ones_like(out)
        del out
        if rt.split:
            measured(Kind.I, s, rt.backward_input, Action(Kind.I, s, t, m, 0), gy)
            del gy
            measured(Kind.W, s, rt.backward_weight, Action(Kind.W, s, t, m, 0))
        else:
            measured(Kind.B, s, rt.backward, Action(Kind.B, s, t, m, 0), gy)
            del gy
        grads = rt.grads(t)
        del rt.buffers[t]
        measured(Kind.U, s, rt.opt.step, grads, rt.lr_for(t))
        del grads
