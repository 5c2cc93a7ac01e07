"""Memory per GPU of an LLM-scale plan: training state as the framework keeps it, activations in
flight, the transient working sets, and the allocator's reserve as a range.

Every term is named in the breakdown (docs/llm-memory.md has each formula and its source):

* ``weights``, ``gradients``, ``master_weights``, ``optimizer``: the framework's training state
  per parameter of the device's stages (:func:`~stalesim.workloads.memory_llm.framework_state`);
* ``weight_versions``: the asynchronous schedules' stashed copies (compute precision);
* ``activations``: the saved activations of the micro-batches in flight at the device's peak;
* ``recompute``: with recomputation, one layer's recomputed set is live again during its
  backward, on top of what is in flight: the whole layer's activations minus what the plan
  saves of it (full: all but the layer input; selective: the attention scores);
* ``backward``: the gradient tensors a layer's backward holds beyond its saved activations
  (:func:`backward_bytes`: the MLP's, or the unfused attention's score-shaped ones once the
  MLP's saved tensors are freed);
* ``gathered``: ZeRO-3 / FSDP gather a unit's (layer's, embedding's, head's) sharded weights
  for its forward and backward, the next unit's ahead of it (prefetch), and hold a unit's full
  gradient until its reduce-scatter: the largest unit on the device, ``gathered x (1 +
  prefetch) + unit_gradients`` bytes per parameter;
* ``loss``: on the device with the last stage, the head's 16-bit logits exist next to their
  fp32 copy (the copy the loss keeps is already in ``activations``): Megatron's
  ``vocab_parallel_cross_entropy`` works in place on that copy; torchtitan's
  ``cross_entropy(pred.float())`` holds one more fp32 copy (log_softmax's input) while it runs.

``total`` (the point) is their sum, the caching allocator's bytes (what torch's peak-memory
counters, and so the sources' measured figures, report); ``outside`` names what the GPU holds
besides, the CUDA context and NCCL's buffers (:mod:`stalesim.sim.llm_capacity`, with the capacity
both are compared with); ``low`` leaves out the transient working sets
(``recompute``, ``backward``, ``gathered``, ``loss``), which may not coincide with the activation peak; ``high``
adds the caching allocator's reserve, :data:`FRAGMENTATION` of the dynamic terms (activations and
the working sets; the state is allocated once, in flat buffers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stalesim.sim.llm_plan import DOUBLE_BUFFER, FILL_DRAIN, INTERLEAVED, ONE_F_ONE_B, STASH, family
from stalesim.workloads.memory_llm import (
    DEEPSPEED,
    DEEPSPEED_MAX_LIVE_PARAMS,
    DEEPSPEED_PREFETCH_PARAMS,
    DEEPSPEED_REDUCE_BUCKET,
    FrameworkState,
    framework_state,
)
from stalesim.workloads.transformer import layer_activation_bytes

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.sim.model import StageCosts
    from stalesim.workloads.hardware import DeviceSpec
    from stalesim.workloads.transformer import TransformerSpec

__all__ = ["COMPONENTS", "FRAGMENTATION", "OUTSIDE", "DeviceMemory", "activations",
           "backward_bytes", "device_memory", "gathered_bytes", "in_flight", "plan_state", "prefetch_units",
           "weight_versions"]

COMPONENTS = ("weights", "gradients", "master_weights", "optimizer", "weight_versions", "activations", "recompute",
              "backward", "gathered", "loss")
# held outside the caching allocator (stalesim.sim.llm_capacity): not in ``total``, which is what
# torch's peak-memory counters (and the sources' measured figures) see, but in the fits verdict
OUTSIDE = ("cuda_context", "nccl_buffers")
TRANSIENT = ("recompute", "backward", "gathered", "loss")
DYNAMIC = ("activations", *TRANSIENT)
# The caching allocator's reserve beyond the allocated bytes, at most: the ZeRO paper (Rajbhandari
# et al. 2020, section 3.2, "Memory Fragmentation") saw runs go out of memory with over 30% of the
# memory still free, i.e. up to 0.3 / 0.7 of the allocated short-lived bytes held as free
# fragments. An upper end, not a measurement of any run here.
FRAGMENTATION = 0.3 / 0.7


@dataclass(frozen=True)
class DeviceMemory:
    """The worst GPU's memory: the point estimate ``total`` (the sum of ``breakdown``, bytes per
    term), its range ``low`` .. ``high`` (module doc) and which pipeline device it is."""

    total: int
    breakdown: dict[str, int]
    device: int
    low: int
    high: int
    outside: dict[str, int] = field(default_factory=dict)


def plan_state(plan: ParallelPlan) -> FrameworkState:
    """The plan's training state per parameter as its framework keeps it."""
    return framework_state(plan.framework, plan.optimizer, plan.precision, plan.zero, plan.dp, pp=plan.pp,
                           error_feedback=plan.error_feedback)


def prefetch_units(plan: ParallelPlan) -> int:
    """Units gathered ahead of the running one with ZeRO-3 / FSDP: ``plan.zero_prefetch``, or the
    framework's default (one: FSDP2's default backward prefetch of the next module, DeepSpeed's
    prefetch bucket, Megatron's ``--overlap-param-gather``)."""
    return 0 if plan.zero_prefetch is False else 1


def device_memory(costs: StageCosts, plan: ParallelPlan, devices: Sequence[Sequence[int]],
                  event_acts: Sequence[float] | None = None, *, spec: TransformerSpec,
                  device: DeviceSpec | None = None) -> DeviceMemory:
    """Memory per GPU of the device that needs the most (module doc): the training state of its
    stages, the asynchronous schedules' extra weight versions, the activations it holds at its
    peak (``event_acts``: measured by the event simulation, else :func:`activations`), the
    working sets of ``spec``'s layers and, given the ``device``, what is held outside the
    allocator there (``outside``: :mod:`stalesim.sim.llm_capacity`)."""
    from stalesim.sim.llm_capacity import cuda_context_bytes, nccl_buffer_bytes
    from stalesim.sim.llm_comm import overlaps

    resident = dict(zip(OUTSIDE, (cuda_context_bytes(device), nccl_buffer_bytes(plan, device)))) \
        if device is not None else {}
    S, M, V = costs.stages, plan.microbatches, plan.chunks
    sched, fam = plan.schedule, family(plan.schedule)
    fs = plan_state(plan)
    w_unsharded = plan.full_state.weights
    n_params = [p / w_unsharded for p in costs.param_bytes]
    t, cp, b = plan.tp, plan.cp, plan.micro_batch
    layer_units = spec.layer_params() / t
    embed_unit = spec.embedding_params() / t
    head_unit = (spec.head_params() + (spec.vocab * spec.hidden if spec.tied_embeddings and S > 1 else 0)) / t
    full_act = layer_activation_bytes(spec, b, tp=t, sp=plan.sp) / cp
    recompute_ws = full_act - layer_activation_bytes(spec, b, tp=t, sp=plan.sp, recompute=plan.recompute) / cp
    backward_ws = backward_bytes(spec, b, t) / cp
    # the 16-bit logits next to the fp32 copy the loss keeps (in ``activations``); torchtitan's
    # ``cross_entropy(pred.float())`` also holds log_softmax's fp32 input while it runs, where
    # Megatron's vocab_parallel_cross_entropy works in place on its one fp32 copy
    loss_ws = (spec.element_bytes + (4 if plan.framework == "fsdp2" else 0)) * b * spec.seq * spec.vocab / t / cp
    pf = prefetch_units(plan)
    # DeepSpeed's contiguous gradient buckets: two, swapped, when it overlaps their reduction
    ipg_buffers = 2 if overlaps(plan).dp else 1
    h, k, f = spec.hidden, spec.kv_dim, spec.ffn_dim
    # the largest linear (Megatron's fused QKV and first MLP projection), per tensor-parallel rank
    linear = max(h * (h + 2 * k), h * f * (2 if spec.ffn_type == "swiglu" else 1)) / t
    best: dict[str, int] = {}
    best_total, best_dev = -1.0, 0
    for d, stages_d in enumerate(devices):
        comp = dict.fromkeys(COMPONENTS, 0.0)
        unit, has_layers = 0.0, False
        for s in stages_d:
            p = n_params[s]
            versions = weight_versions(sched, S, s)
            grads = 2 if fam == DOUBLE_BUFFER else 1
            comp["weights"] += p * fs.weights
            comp["weight_versions"] += p * fs.version * (versions - 1)
            comp["gradients"] += p * fs.gradients * grads
            comp["master_weights"] += p * fs.master
            comp["optimizer"] += p * fs.optimizer
            lo, hi = costs.layer_ranges[s] if costs.layer_ranges else (0, 1)
            has_layers = has_layers or hi > lo
            unit = max(unit, layer_units if hi > lo else 0.0, embed_unit if s == 0 else 0.0,
                       head_unit if s == S - 1 else 0.0)
            if s == S - 1:
                comp["loss"] = loss_ws
        comp["activations"] = event_acts[d] if event_acts is not None else activations(costs, sched, S, M, d, V)
        comp["recompute"] = recompute_ws if has_layers else 0.0
        comp["backward"] = backward_ws if has_layers else 0.0
        comp["gathered"] = gathered_bytes(plan.framework, fs, unit, linear, pf, reduce_buffers=ipg_buffers)
        total = sum(comp.values())
        if total > best_total:
            best_total, best_dev, best = total, d, {k: round(v) for k, v in comp.items()}
    total_i = sum(best.values())
    low = total_i - sum(best[k] for k in TRANSIENT)
    high = total_i + round(FRAGMENTATION * sum(best[k] for k in DYNAMIC))
    return DeviceMemory(total=total_i, breakdown=best, device=best_dev, low=low, high=high, outside=resident)


def backward_bytes(spec: TransformerSpec, batch: int, tp: int = 1) -> float:
    """The gradient tensors one layer's backward holds at once beyond its saved activations, per
    GPU, at the worse of its two phases. The MLP's backward runs first and holds its gradient
    tensors (GELU: of its output and its input, ``e f`` per token each; SwiGLU: of the product,
    the gate and the up projection, three); it then frees its saved f-wide tensors (as many), and
    the unfused attention core's backward holds its score-shaped gradients (of the dropout output
    and of the softmax, ``e a s`` per token each; one without dropout; FlashAttention none)."""
    e, n = spec.element_bytes, batch * spec.seq
    mlp = (3 if spec.ffn_type == "swiglu" else 2) * e * n * spec.ffn_dim
    attn = 0.0 if spec.attention == "flash" else (2 if spec.dropout else 1) * e * spec.heads * spec.seq * n
    return max(mlp, attn - mlp) / tp


def gathered_bytes(framework: str, fs: FrameworkState, unit: float, linear: float, prefetch: int, *,
                   reduce_buffers: int = 1) -> float:
    """Bytes of gathered weights and not yet reduced gradients while the device's largest unit
    (``unit`` parameters per GPU; ``linear``: its largest linear) runs its backward: FSDP and
    Megatron gather the whole unit and ``prefetch`` more and hold its full gradient; DeepSpeed
    gathers module by module within its live, prefetch and bucket bounds, copies each gradient
    into one of its ``reduce_buffers`` contiguous buckets of ``reduce_bucket_size`` and keeps a
    parameter larger than the bucket in its own full gradient until that is reduced (stage3.py's
    ``extra_large_param_to_reduce``)."""
    if not (fs.gathered or fs.unit_gradients):
        return 0.0
    if framework in DEEPSPEED:
        live = min(unit, max(linear, DEEPSPEED_MAX_LIVE_PARAMS))
        ahead = prefetch * min(unit, DEEPSPEED_PREFETCH_PARAMS)
        large = linear if linear > DEEPSPEED_REDUCE_BUCKET else 0.0
        buckets = reduce_buffers * min(unit, DEEPSPEED_REDUCE_BUCKET)
        return (live + ahead) * fs.gathered + (buckets + large) * fs.unit_gradients
    return unit * (fs.gathered * (1 + prefetch) + fs.unit_gradients)


def in_flight(schedule: str, S: int, M: int, s: int, chunks: int = 1) -> int:
    """Micro-batches (whole batches without micro-batching) whose activations stage (device) ``s``
    holds at its peak; the memory model's simultaneous count (checked in the tests)."""
    fam = family(schedule)
    if fam == FILL_DRAIN:
        return M
    if fam in (ONE_F_ONE_B, DOUBLE_BUFFER):
        return min(S - s, M)
    if fam == INTERLEAVED:
        R = S // chunks
        return min(M * chunks, (chunks - 1) * R + 2 * (R - 1 - s) + 1)
    if fam == STASH:
        return S - s
    return 2 * (S - 1 - s) + 1  # the register pipeline


def weight_versions(schedule: str, S: int, s: int) -> int:
    """Weight versions stage ``s`` keeps (live + stashed)."""
    fam = family(schedule)
    if fam == STASH:
        return S - s
    if fam == DOUBLE_BUFFER:
        return 1 if s == S - 1 else 2
    return 1


def activations(costs: StageCosts, sched: str, S: int, M: int, d: int, V: int) -> float:
    """Activation bytes device ``d`` holds at its peak: in-flight micro-batches x its stages' saved
    bytes (with chunks, the device's in-flight chunk micro-batches spread over its chunks)."""
    R = S // V
    if V == 1:
        return costs.saved_bytes[d] * in_flight(sched, S, M, d)
    per_chunk = max(costs.saved_bytes[s] for s in range(d, S, R))
    return per_chunk * in_flight(sched, S, M, d, V)
