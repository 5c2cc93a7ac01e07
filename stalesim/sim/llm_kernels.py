"""Seconds per micro-batch of one transformer layer, the embedding and the head on one GPU.

Times per GPU and kernel type (:class:`KernelEfficiency`, stated once, never per
configuration): GEMM FLOPs at ``gemm`` x peak, attention score/value products at
``attention`` x peak, element-wise work (norms, GELU/SwiGLU, softmax, dropout,
residual adds, the loss) at ``memory`` x memory bandwidth by the bytes it reads
and writes, plus a launch overhead per kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from stalesim.sim.model import NS, SimHardware
from stalesim.workloads.transformer import TransformerSpec

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import DeviceSpec

__all__ = ["DEFAULT_EFFICIENCY", "KernelEfficiency", "LayerTimes", "layer_times", "layer_wgrad_bytes"]


@dataclass(frozen=True)
class KernelEfficiency:
    """Achievable fraction of peak per kernel type (one set for every prediction).

    Assumptions, chosen once before comparing with any published table and not
    measured here (no GPU was available): ``gemm``, large bf16 GEMMs of
    transformer shape at about 70% of an A100's or H100's dense peak (typical
    cuBLAS figures); ``attention``, the batched score and value products, smaller,
    at about half; ``memory``, element-wise kernels streaming at about 80% of the
    memory bandwidth; ``overhead_s``, the launch and dispatch cost of one kernel
    (about 10 per layer and pass).
    """

    gemm: float = 0.70
    attention: float = 0.50
    memory: float = 0.80
    overhead_s: float = 5e-6

    def to_dict(self) -> dict[str, float]:
        return {"gemm": self.gemm, "attention": self.attention, "memory": self.memory,
                "overhead_s": self.overhead_s}


DEFAULT_EFFICIENCY = KernelEfficiency()
# kernels launched per layer and pass (QKV, scores, softmax, AV, proj, 2 norms, 2 MLP linears, activation)
_KERNELS_PER_LAYER = 10


# ---------------------------------------------------------------- per-layer times
@dataclass(frozen=True)
class _Pass:
    gemm: float = 0.0  # FLOPs
    attention: float = 0.0
    mem: float = 0.0  # bytes of element-wise work
    collectives: int = 0  # tensor-parallel collectives of one activation each (all-reduce pairs)

    def __add__(self, o: _Pass) -> _Pass:
        return _Pass(self.gemm + o.gemm, self.attention + o.attention, self.mem + o.mem,
                     self.collectives + o.collectives)

    def scaled(self, k: float) -> _Pass:
        return _Pass(self.gemm * k, self.attention * k, self.mem * k, round(self.collectives * k))


def _layer_forward(spec: TransformerSpec, b: int, t: int, sp: bool) -> _Pass:
    """One layer's forward per tensor-parallel rank: FLOPs and element-wise bytes."""
    e, n = spec.element_bytes, b * spec.seq
    h, f, a, s = spec.hidden, spec.ffn_dim, spec.heads, spec.seq
    outer = 1 / t if sp else 1.0
    # norms (read + write), two residual adds with dropout (read 2, write 1, mask): outside the TP region
    mem = outer * (2 * 2 * e * n * h + 2 * (3 * e * n * h + (n * h if spec.dropout else 0)))
    # activation: GELU reads/writes f; SwiGLU reads gate and up, writes their product
    mem += (2 if spec.ffn_type == "gelu" else 3) * e * n * f / t
    if spec.attention == "unfused":  # scale + mask + softmax (read, write), dropout (read, write, mask)
        mem += (2 * e + (2 * e + 1 if spec.dropout else 0)) * a * s * n / t
    return _Pass(spec.layer_gemm_flops(b) / t, spec.layer_attention_flops(b) / t, mem, 2)


def _head_forward(spec: TransformerSpec, b: int, t: int) -> _Pass:
    """Final norm + vocabulary-parallel logits + cross-entropy (fp32 softmax over V / t)."""
    e, n = spec.element_bytes, b * spec.seq
    mem = 2 * e * n * spec.hidden + 3 * 4 * n * spec.vocab / t
    return _Pass(spec.logits_flops(b) / t, 0.0, mem, 1)


def _embed_forward(spec: TransformerSpec, b: int, t: int) -> _Pass:
    """Vocabulary-parallel embedding: a gather (writes b s h) and one all-reduce of it."""
    return _Pass(0.0, 0.0, 2 * spec.element_bytes * b * spec.seq * spec.hidden, 1 if t > 1 else 0)


def _seconds(p: _Pass, dev: DeviceSpec, dtype: str, eff: KernelEfficiency, coll_s: float, kernels: int) -> float:
    peak = dev.flops_per_s(dtype)
    return (p.gemm / (peak * eff.gemm) + p.attention / (peak * eff.attention)
            + p.mem / (dev.mem_bandwidth_Bps * eff.memory) + p.collectives * coll_s + kernels * eff.overhead_s)


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per micro-batch per GPU: one layer's forward and backward (recomputation included),
    the embedding's and the head's, and one tensor-parallel collective."""

    layer_f: float
    layer_b: float
    embed_f: float
    embed_b: float
    head_f: float
    head_b: float
    collective: float
    # the weight-gradient GEMMs inside layer_b / head_b (W of a split backward; I is the rest)
    layer_w: float = 0.0
    head_w: float = 0.0


def layer_times(spec: TransformerSpec, plan: ParallelPlan, dev: DeviceSpec, hw: SimHardware,
                eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> LayerTimes:
    """Per-GPU seconds of one micro-batch through a layer, the embedding and the head (module doc)."""
    b, t = plan.micro_batch, plan.tp
    act = spec.layer_output_bytes(b)
    coll = hw.allreduce_ns(act, t) / NS if t > 1 else 0.0
    dt = spec.dtype
    fw = _layer_forward(spec, b, t, plan.sp)
    # backward: input and weight gradients (2 x the GEMMs and products), the element-wise work
    # again with gradients (read saved + grad, write grad: 2 x), the same collectives
    bw = _Pass(2 * fw.gemm, 2 * fw.attention, 2 * fw.mem, fw.collectives)
    if plan.recompute == "full":
        bw = bw + fw
    elif plan.recompute == "selective":
        attn_mem = _layer_forward(spec, b, t, plan.sp).mem - _layer_forward(
            replace(spec, attention="flash"), b, t, plan.sp).mem
        bw = bw + _Pass(0.0, fw.attention, attn_mem, 0)
    k = _KERNELS_PER_LAYER
    hf = _head_forward(spec, b, t)
    ef = _embed_forward(spec, b, t)
    return LayerTimes(
        layer_f=_seconds(fw, dev, dt, eff, coll, k),
        layer_b=_seconds(bw, dev, dt, eff, coll, 2 * k + (k if plan.recompute == "full" else 0)),
        embed_f=_seconds(ef, dev, dt, eff, coll, 1), embed_b=_seconds(ef, dev, dt, eff, 0.0, 1),
        head_f=_seconds(hf, dev, dt, eff, coll, 3),
        head_b=_seconds(_Pass(2 * hf.gemm, 0.0, hf.mem, 1), dev, dt, eff, coll, 4),
        collective=coll,
        # W: one GEMM per weight matrix, as many FLOPs as its forward (dL/dW = x^T dy)
        layer_w=_seconds(_Pass(fw.gemm), dev, dt, eff, 0.0, 4 if spec.ffn_type == "gelu" else 5),
        head_w=_seconds(_Pass(hf.gemm), dev, dt, eff, 0.0, 1))


def layer_wgrad_bytes(spec: TransformerSpec, b: int, t: int) -> float:
    """Bytes a deferred weight gradient (W) keeps per layer and rank between its I and W: the
    output gradients of the layer's linears (QKV, output projection, MLP up/gate and down); their
    inputs are saved activations already."""
    h, k, f = spec.hidden, spec.kv_dim, spec.ffn_dim
    widths = (h + 2 * k) + h + (2 if spec.ffn_type == "swiglu" else 1) * f + h
    return spec.element_bytes * b * spec.seq * widths / t
