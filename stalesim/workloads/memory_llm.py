"""Training state per parameter: weights, gradients and optimizer state by optimizer, precision and ZeRO stage.

The rule (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", section 3.1): mixed-precision Adam keeps 16-bit
weights (2 bytes) and gradients (2 bytes), and an fp32 master copy plus two
fp32 moments (4 + 4 + 4 = 12 bytes), 16 bytes per parameter. Other optimizers
change the moment count (momentum SGD and Muon keep one), fp32 training drops the
master copy. Error feedback (the stale schedules' one-step-delay correction,
:mod:`stalesim.runtime.optim`) keeps the previous step, one more fp32 tensor per
parameter, counted and sharded with the optimizer state as the runtime counts it
(:func:`~stalesim.runtime.optim.state_copies`). ZeRO stage 1 shards the optimizer state over the ``dp`` data-parallel
ranks, stage 2 also the gradients, stage 3 also the weights.

The extra weight versions of the asynchronous schedules (PipeDream's stash,
2BW's double buffer) are copies of the weights the forward used, so they are
counted at the *weight* precision (2 bytes per parameter in mixed precision),
never sharded (each rank's backward reads its own full stage).

That rule is the generic one the event engine and the update time use. What a
GPU really holds depends on the framework's conventions, so the memory estimate
reads :func:`framework_state` instead: per framework, the bytes per parameter of
the compute copy of the weights, the gradient accumulation buffer, the fp32
master weights and the optimizer moments, each sharded as that framework shards
it, plus the transient bytes of a unit (a layer, the embedding, the head) whose
sharded weights are gathered for its forward and backward. The rules, each from
the framework's own source or documentation (mixed precision means bf16 here):

* ``megatron`` (Megatron-LM's ``Float16OptimizerWithFloat16Params`` and its
  ``DistributedDataParallel``): bf16 weights 2, an fp32 ``main_grad`` buffer 4
  (``--bf16`` forces ``accumulate_allreduce_grads_in_fp32``,
  ``megatron/training/arguments.py``), fp32 master 4, fp32 moments 8: 18 bytes,
  the "bf16 param, fp32 grads" row of Megatron-LM's ``docs/source/api-guide/
  distrib_optimizer.md`` table. ``zero`` 1/2/3 are Megatron-FSDP's
  ``--data-parallel-sharding-strategy`` ``optim`` / ``optim_grads`` /
  ``optim_grads_params``.
* ``megatron-distopt`` (``--use-distributed-optimizer``): the same with master
  and moments sharded over ``dp``, the fp32 gradient buffer whole (it is the
  reduce-scatter's input): ``6 + 12/d``, the table's other column (``zero`` at
  least 1).
* ``deepspeed``: ``zero`` <= 1 with bf16 runs ``BF16_Optimizer``
  (``deepspeed/runtime/engine.py`` picks it for a bf16 model with fp32 gradient
  accumulation at stage 1; ``deepspeed/runtime/bf16_optimizer.py`` keeps a flat
  fp32 gradient accumulation buffer, ``fp32_groups_gradients_flat``, for every
  parameter): 2 + 4 + 12 (master and moments / d at stage 1). ``zero`` 2/3 run
  the ZeRO optimizers (``stage_1_and_2.py``, ``stage3.py``): bf16 gradient
  partitions, the ZeRO paper's 2 + 2 + 12 sharded as the stage says.
* ``deepspeed-2021`` (DeepSpeed's ZeRO as released in 2021, v0.3.13 to v0.5): the same rules; its
  collectives and overlap defaults differ (:mod:`stalesim.sim.llm_comm`).
* ``fsdp2`` (``torch.distributed.fsdp.fully_shard`` with torchtitan's
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``): the sharded
  parameters are fp32 and are the optimizer's master copy (4/d), the sharded
  gradients fp32 (4/d), the moments 8/d; a unit's bf16 weights (2) are gathered
  for its forward and backward and its full gradient (bf16, then its fp32 copy
  for the reduce-scatter: 2 + 4) exists until the reduce-scatter. ``zero`` 3 is
  ``reshard_after_forward=True``; 2 is ``False`` (the stage's gathered weights
  stay from forward to backward); 0 is torchtitan's default
  (``fsdp_reshard_after_forward="default"``: 3 without a pipeline, 2 with one);
  1 does not exist in FSDP2. With a pipeline, torch's ``PipelineStage`` turns off
  gradient synchronisation and resharding after backward for all but the last
  micro-batch (``torch/distributed/pipelining/stage.py``), and FSDP2
  accumulates those unsharded gradients in ``reduce_dtype``
  (``FSDPParam.to_accumulated_grad_if_needed``): the stage's whole bf16 weights
  and a whole fp32 gradient buffer live through the step.

fp32 training drops the master copy and keeps fp32 weights and gradients in
every framework (Megatron's "fp32 param, fp32 grads" row: 16 and ``8 + 8/d``).
"""

from __future__ import annotations

from dataclasses import dataclass

from stalesim.errors import StalesimError

__all__ = ["DEEPSPEED", "FRAMEWORK_RULES", "OPTIMIZERS", "PRECISIONS", "ZERO_STAGES", "FrameworkState", "StateBytes",
           "framework_state", "state_bytes"]

# moments kept per parameter (fp32 each)
OPTIMIZERS = {"adam": 2, "adamw": 2, "muon": 1, "sgd": 1}
PRECISIONS = ("mixed", "fp32")
ZERO_STAGES = (0, 1, 2, 3)
# the frameworks whose memory conventions :func:`framework_state` knows (module doc), with the ZeRO
# stages each offers (FSDP2 has no optimizer-only sharding; 0 there is torchtitan's default)
FRAMEWORK_RULES: dict[str, tuple[int, ...]] = {
    "megatron": (0, 1, 2, 3), "megatron-distopt": (0, 1, 2, 3), "deepspeed": (0, 1, 2, 3),
    "deepspeed-2021": (0, 1, 2, 3), "fsdp2": (0, 2, 3)}
# DeepSpeed's releases: the same state rules (its 2021 ZeRO-3 differs in communication only)
DEEPSPEED = ("deepspeed", "deepspeed-2021")

# DeepSpeed ZeRO-3 gathers per module (each linear), not per layer, and bounds what it holds by
# its configuration defaults (DeepSpeed's ZeRO configuration docs): it keeps up to
# ``stage3_max_live_parameters`` (1e9) gathered, prefetches ``stage3_prefetch_bucket_size``
# (5e7) ahead, and reduces gradients through ``reduce_bucket_size`` (5e8) element buckets (ZeRO-2
# too); counts per rank.
DEEPSPEED_MAX_LIVE_PARAMS = 1_000_000_000
DEEPSPEED_PREFETCH_PARAMS = 50_000_000
DEEPSPEED_REDUCE_BUCKET = 500_000_000
# ``stage3_max_reuse_distance`` (1e9): a module's gathered weights are kept after it ran when the
# parameters used before its next use number fewer (the coordinator's ``_keep_for_later``)
DEEPSPEED_MAX_REUSE_DISTANCE = 1_000_000_000


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each component, after ZeRO sharding over ``dp`` ranks."""

    weights: float
    gradients: float
    optimizer: float
    version: float  # one extra weight version (stash / double buffer)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes(optimizer: str = "adam", precision: str = "mixed", zero: int = 0, dp: int = 1, *,
                error_feedback: bool = False) -> StateBytes:
    """Bytes per parameter for ``optimizer`` in ``precision`` with ZeRO ``zero`` over ``dp`` ranks
    (``error_feedback``: one more fp32 buffer in the optimizer state).

    >>> state_bytes().total                      # mixed-precision Adam: 2 + 2 + 12
    16.0
    >>> state_bytes(zero=1, dp=8).optimizer      # 12 / 8
    1.5
    """
    if optimizer not in OPTIMIZERS:
        raise StalesimError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise StalesimError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if zero not in ZERO_STAGES:
        raise StalesimError(f"zero: expected 0, 1, 2 or 3, got {zero!r}")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise StalesimError(f"dp: expected an integer >= 1, got {dp!r}")
    moments = 4.0 * (OPTIMIZERS[optimizer] + (1 if error_feedback else 0))
    if precision == "mixed":
        w, g, o = 2.0, 2.0, 4.0 + moments  # fp32 master copy + moments
    else:
        w, g, o = 4.0, 4.0, moments
    return StateBytes(weights=w / dp if zero >= 3 else w, gradients=g / dp if zero >= 2 else g,
                      optimizer=o / dp if zero >= 1 else o, version=w)


@dataclass(frozen=True)
class FrameworkState:
    """Bytes per parameter a framework keeps on one GPU (module doc), after its sharding over ``dp``.

    ``weights``: the compute copy kept through the step; ``gradients``: the gradient
    accumulation buffer; ``master``: the fp32 master weights; ``optimizer``: the moments (and
    error feedback). ``gathered``: bytes per parameter of one unit whose sharded weights are
    gathered while it runs (0: nothing is gathered); ``unit_gradients``: the unit's full gradient
    before its reduce-scatter; ``zero``: the sharding stage in effect (the framework's default
    resolved).
    """

    weights: float
    gradients: float
    master: float
    optimizer: float
    gathered: float
    unit_gradients: float
    version: float
    zero: int

    @property
    def total(self) -> float:
        """The persistent bytes per parameter (no gathered unit)."""
        return self.weights + self.gradients + self.master + self.optimizer


def framework_state(framework: str = "megatron", optimizer: str = "adam", precision: str = "mixed", zero: int = 0,
                    dp: int = 1, *, pp: int = 1, error_feedback: bool = False) -> FrameworkState:
    """Bytes per parameter of ``framework``'s training state (module doc) with ZeRO ``zero`` over ``dp``
    ranks and ``pp`` pipeline stages.

    >>> framework_state().total                               # Megatron-LM, bf16: 2 + 4 + 4 + 8
    18.0
    >>> framework_state("megatron-distopt", dp=8).total       # 6 + 12 / 8
    7.5
    >>> framework_state("fsdp2", dp=8).total                  # (4 + 4 + 8) / 8, weights gathered per unit
    2.0
    """
    state_bytes(optimizer, precision, zero, dp)  # validates the shared fields
    if framework not in FRAMEWORK_RULES:
        raise StalesimError(f"framework: expected one of {', '.join(FRAMEWORK_RULES)}, got {framework!r}")
    if zero not in FRAMEWORK_RULES[framework]:
        raise StalesimError(f"zero: {framework} offers stages {', '.join(map(str, FRAMEWORK_RULES[framework]))}, "
                            f"not {zero}")
    moments = 4.0 * (OPTIMIZERS[optimizer] + (1 if error_feedback else 0))
    mixed = precision == "mixed"
    lp = 2.0 if mixed else 4.0  # the compute copy: bf16 in mixed precision
    if framework == "fsdp2":
        z = zero or (3 if pp == 1 else 2)
        # the sharded fp32 parameters are the master copy; no separate low-precision copy persists
        w, g, m, o = 0.0, 4.0 / dp, 4.0 / dp, moments / dp
        if z == 2 or pp > 1:  # the gathered weights stay from forward to backward
            w = lp
        if pp > 1:  # PipelineStage accumulates the unsharded gradients in reduce_dtype (fp32)
            g += 4.0
        unit_g = 0.0 if pp > 1 else lp + (4.0 if mixed else 0.0)  # the bf16 gradient and its fp32 copy
        return FrameworkState(weights=w, gradients=g, master=m, optimizer=o, gathered=lp if w == 0 else 0.0,
                              unit_gradients=unit_g, version=lp, zero=z)
    z = max(zero, 1) if framework == "megatron-distopt" else zero
    if framework in DEEPSPEED and z >= 2:
        g = lp  # the ZeRO optimizers' gradient partitions are in the model's dtype
    else:
        g = 4.0  # Megatron's main_grad, DeepSpeed's BF16_Optimizer accumulation buffer: fp32
    m = 4.0 if mixed else 0.0
    return FrameworkState(weights=lp / dp if z >= 3 else lp, gradients=g / dp if z >= 2 else g,
                          master=m / dp if z >= 1 else m, optimizer=moments / dp if z >= 1 else moments,
                          gathered=lp if z >= 3 else 0.0, unit_gradients=g if z >= 2 else 0.0, version=lp, zero=z)
