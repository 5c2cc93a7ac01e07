"""K training runs of one shape as one: the batched ("wide") stage runtime.

A staleness study is a grid of small runs that share the model shape, the
schedule and the partition and differ in seeds, learning rates, weight decay or
mitigations. Run one after another they leave the device idle (per-action Python
overhead, small kernels); run together they fill it (horizontally fused training,
HFTA, MLSys 2021). Here the K runs of a batch become **one** stage runtime per
(worker, stage) whose tensors carry a leading run axis:

* :class:`WideModule`: the K copies of a stage, parameters stacked ``[K, ...]``
  (:func:`torch.func.stack_module_state`); ``forward(x)`` with ``x`` of shape
  ``[K, B, ...]`` is ``vmap(functional_call(stage, params_k, x_k))``. Every
  parameter of the wide module is one stacked leaf tensor, so the version machinery
  of :class:`~stalesim.runtime.stage.StageRuntime` works unchanged on it: the pack
  hook sees saved tensors that share storage with a stacked parameter (vmap's
  batching rules save views of it: ``bmm`` of the transposed weight, grouped
  convolution of the reshaped weight, ...) and stores a token, the unpack hook
  substitutes the stacked tensor of version v_B, the stash clones stacked versions
  lazily. All K runs read the same version index (they share the schedule), each
  from its own slice.
* :class:`BatchedOptimizer`: SGD (momentum, Nesterov), Adam, AdamW and the Adam
  look-ahead on stacked tensors with **per-run** hyper-parameters (learning rate,
  momentum, betas, eps, weight decay, clipping norm, error feedback): scalars of
  run k are Python floats turned into ``[K, 1, ...]`` tensors where they are used,
  so each run's arithmetic is that of :class:`~stalesim.runtime.optim.StageOptimizer`
  up to float rounding (the same formulas, in torch's order). Each distinct ``[K]``
  vector is uploaded once (cached, asynchronously on CUDA), not once per parameter:
  a synchronous upload per use would stall a GPU on the host several times per
  parameter and update. Per-run clipping norms are the L2 norm over this stage's
  parameters of run k only, and the clipping coefficient stays on the device.
* :class:`BatchedMitigations`: the mitigations of
  :mod:`stalesim.runtime.mitigations` with a per-run on/off mask and per-run
  coefficients (delays come from the shared version table), so runs of one batch
  can differ in mitigations.
* the loss is per run (a ``[K]`` vector; the backward starts from its sum, whose
  gradient with respect to run k's parameters is exactly run k's gradient).

What K runs must share (:func:`check_batch`): everything that decides the shape of a
tensor or the schedule: model, dataset, schedule, stages/PPV, micro-batches,
workers, length, batch size, dtype, device, optimizer kind, warm-up/switch,
compression. What may differ: :data:`PER_RUN_FIELDS`. BatchNorm running statistics
are buffers updated in place by every forward; they are not stacked, so models with
BatchNorm are refused (one line) rather than silently shared between runs.

**Exactness.** Per run, the batched computation is the single run's computation
with the run axis added: in float64 the losses equal separate runs to round-off
(tested to 1e-10 relative); in float32 batched kernels (``bmm``, grouped
convolution) sum in another order than the single-run kernels, and the
differences (about 1e-7 relative per step) grow with training like any float32
reassociation (the tolerance is stated in ``tests/unit/test_emulator_batched.py``).

One module per concept: :mod:`.batchable` (what runs may share a batch), :mod:`.wide`
(the stacked module), :mod:`.optimizer`, :mod:`.mitigations`, :mod:`.runtime` (the stage
runtime, the per-run loss, the all-reduce) and :mod:`.memory` (the estimate before a batch
is built); this package re-exports their public names.
"""

from __future__ import annotations

from stalesim.runtime.batched.batchable import PER_RUN_FIELDS, check_batch
from stalesim.runtime.batched.memory import (
    available_bytes,
    check_fits,
    estimate_batch_bytes,
    saved_bytes_per_sample,
)
from stalesim.runtime.batched.mitigations import BatchedMitigations
from stalesim.runtime.batched.optimizer import BatchedOptimizer
from stalesim.runtime.batched.runtime import (
    BatchedStageRuntime,
    compress_runs,
    mean_runs_in_process,
    per_run_loss,
)
from stalesim.runtime.batched.wide import FoldedWide, VmapWide, WideModule, wide

__all__ = [
    "PER_RUN_FIELDS", "BatchedMitigations", "BatchedOptimizer", "BatchedStageRuntime", "FoldedWide", "VmapWide",
    "WideModule", "available_bytes", "check_batch", "check_fits", "compress_runs", "estimate_batch_bytes",
    "mean_runs_in_process", "per_run_loss", "saved_bytes_per_sample", "wide",
]
