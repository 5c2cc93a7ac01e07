"""Seconds per micro-batch of one transformer layer, the embedding and the head on one GPU.

Every GEMM of a layer (QKV, output projection, MLP up/gate and down; in the
backward their input-gradient and weight-gradient products, whose shapes differ:
``dX = dY W^T`` is ``m x k`` over ``n``, ``dW = X^T dY`` is ``k x n`` over the
``m`` tokens) is timed at its own shape's efficiency
(:func:`stalesim.workloads.kernel_efficiency.gemm_efficiency`: a published
ceiling per GPU class, wave quantization over the SMs, the roofline; or a table
measured by ``stalesim calibrate --gemm``). ``m`` is the tokens of one
micro-batch on one rank (``b s / cp``), ``n`` and ``k`` the tensor-parallel
slices of the weights. Attention: ``unfused`` (Megatron's baddbmm + softmax +
bmm) as two batched GEMMs of ``b a / t`` heads and their four backward products;
``flash`` as one fused kernel per pass that skips a causal mask's upper blocks,
its backward 2.5 x the forward's FLOPs (it recomputes the scores: the
FlashAttention-2 paper's count) at the kernel's published ceiling
(``KernelEfficiency.flash_kernel``). Element-wise work (norms, GELU/SwiGLU,
softmax, dropout, residual adds, the loss) streams its bytes at ``memory`` x the
memory bandwidth, plus a launch overhead per kernel.

Context parallelism (``plan.cp``, Megatron-Core with TransformerEngine's
``AttnFuncWithCPAndKVP2P``): each rank holds ``s / cp`` tokens of every sequence
(load-balanced causal halves, so every rank does ``1 / cp`` of the attention),
its GEMMs and element-wise work are ``1 / cp`` of the sequence's; its queries
meet all keys in ``cp`` steps while K and V travel around the ring, ``cp - 1``
messages of the rank's K and V chunk per layer and pass, each overlapped with
one step's attention ("overlap current-step compute with next-step
communication", TransformerEngine's docstring), so a step exposes
``max(0, message - step compute)``; the backward sends K, V and their gradients.
The ring runs over the node's link when ``tp x cp`` GPUs fit a node, else the
network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError
from stalesim.sim.llm_comm import overlaps, tp_backward_hidden_s
from stalesim.sim.model import NS, SimHardware
from stalesim.workloads.kernel_efficiency import (
    FLASH_KERNELS,
    AttentionShape,
    GemmShape,
    KernelTable,
    attention_efficiency,
    gemm_efficiency,
    table_for,
)
from stalesim.workloads.transformer import TransformerSpec, op_checkpoint_linears

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import DeviceSpec

__all__ = ["CONSTANT_EFFICIENCY", "DEFAULT_EFFICIENCY", "FLASH_BACKWARD_FLOPS", "SHAPE_EFFICIENCY", "KernelEfficiency",
           "LayerTimes", "cp_ring_s", "layer_gemms", "layer_times", "layer_w_input_bytes", "layer_wgrad_bytes"]

# a flash kernel's backward runs 2.5 x its forward's FLOPs: five block products (S = QK^T again,
# dP, dS, dQ, dK, dV less the forward's P V) against the forward's two, the FlashAttention-2
# paper's benchmark convention
FLASH_BACKWARD_FLOPS = 2.5


@dataclass(frozen=True)
class KernelEfficiency:
    """How kernels are timed; the fields override the by-shape model when set.

    ``gemm``: one fraction of peak for every GEMM (None: by shape, module doc);
    ``attention``: one fraction of peak for the counted attention FLOPs (the full
    ``4 b s^2 h``, backward 2 x; None: by shape); ``memory``: element-wise kernels
    streaming at about 80% of the memory bandwidth; ``overhead_s``: the launch and
    dispatch cost of one kernel (about 10 per layer and pass); ``flash_kernel``:
    which fused attention's published ceiling applies (``flash``: FlashAttention-2,
    what torch's SDPA runs; ``fa3``: FlashAttention-3 on Hopper); ``table``: a
    measured table (None: the device's stored one, if any).
    ``KernelEfficiency(gemm=0.70, attention=0.50)`` is the one-constant model the
    estimate used before it timed GEMMs by shape.
    """

    gemm: float | None = None
    attention: float | None = None
    memory: float = 0.80
    overhead_s: float = 5e-6
    flash_kernel: str = "flash"
    table: KernelTable | None = None

    def __post_init__(self) -> None:
        for f in ("gemm", "attention", "memory"):
            v = getattr(self, f)
            if v is not None and not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise StalesimError(f"{f}: a fraction of peak in (0, 1], got {v!r}")
        if not (isinstance(self.overhead_s, (int, float)) and self.overhead_s >= 0):
            raise StalesimError(f"overhead_s: expected seconds >= 0, got {self.overhead_s!r}")
        if self.flash_kernel not in FLASH_KERNELS:
            raise StalesimError(f"flash_kernel: expected one of {', '.join(FLASH_KERNELS)}, "
                                f"got {self.flash_kernel!r}")

    def to_dict(self) -> dict[str, float]:
        """The numeric settings (``gemm``/``attention`` only when they override the by-shape model)."""
        out = {"memory": self.memory, "overhead_s": self.overhead_s}
        for f in ("gemm", "attention"):
            v = getattr(self, f)
            if v is not None:
                out[f] = float(v)
        return out


# every kernel by its shape (module doc; the calibrated table where one is stored)
SHAPE_EFFICIENCY = KernelEfficiency()
# the one-constant model: large bf16 GEMMs at about 70% of an A100's or H100's dense peak (typical
# cuBLAS figures), the attention products at about half, chosen once before any published table was
# compared and never measured here
CONSTANT_EFFICIENCY = KernelEfficiency(gemm=0.70, attention=0.50)
# what an estimate uses unless told: still the constant model, because the by-shape one, whose
# ceilings are best-shape measurements on 2024-25 software, predicts every Megatron-LM Table 1 row
# too fast (with the launch script's micro-batches and interleaving: median 17.4% / max 28.6%,
# against 2.2% / 10.4% for the constant model), above that check's bound; switching is this line
DEFAULT_EFFICIENCY = CONSTANT_EFFICIENCY
# kernels launched per layer and pass (QKV, scores, softmax, AV, proj, 2 norms, 2 MLP linears, activation)
_KERNELS_PER_LAYER = 10


# ---------------------------------------------------------------- shapes
def layer_gemms(spec: TransformerSpec, tokens: int, tp: int) -> tuple[GemmShape, ...]:
    """The forward GEMMs of one layer's linears on one tensor-parallel rank: QKV (column-parallel),
    output projection (row-parallel), MLP up (and gate, fused: SwiGLU) and down."""
    h, f = spec.hidden, spec.ffn_dim
    up = (2 if spec.ffn_type == "swiglu" else 1) * f
    return (GemmShape(tokens, math.ceil((h + 2 * spec.kv_dim) / tp), h),
            GemmShape(tokens, h, math.ceil(h / tp)),
            GemmShape(tokens, math.ceil(up / tp), h),
            GemmShape(tokens, h, math.ceil(f / tp)))


def _dgrad(g: GemmShape) -> GemmShape:
    return GemmShape(g.m, g.k, g.n, g.batch)  # dX = dY W^T


def _wgrad(g: GemmShape) -> GemmShape:
    return GemmShape(g.k, g.n, g.m, g.batch)  # dW = X^T dY: the tokens are the inner dimension


class _Timer:
    """Seconds of GEMMs and attention on one device at the chosen efficiencies."""

    def __init__(self, dev: DeviceSpec, dtype: str, eff: KernelEfficiency) -> None:
        self.dev, self.dtype, self.eff = dev, dtype, eff
        self.peak = dev.flops_per_s(dtype)
        self.table = eff.table if eff.table is not None else table_for(dev)

    def gemm(self, g: GemmShape) -> float:
        e = self.eff.gemm if self.eff.gemm is not None else gemm_efficiency(self.dev, g, self.dtype, self.table)
        return g.flops / (self.peak * e)

    def gemms(self, gs: tuple[GemmShape, ...] | list[GemmShape]) -> float:
        return sum(self.gemm(g) for g in gs)

    def attention(self, spec: TransformerSpec, b: int, tp: int, cp: int, backward: bool) -> float:
        """One layer's score and value products on one rank (module doc)."""
        heads = max(1, spec.heads // tp)
        s, sq, d = spec.seq, spec.seq // cp, spec.head_dim
        if self.eff.attention is not None:  # the override: counted FLOPs, full square, backward 2 x
            return (2 if backward else 1) * spec.layer_attention_flops(b) / (tp * cp) / (self.peak * self.eff.attention)
        if spec.attention == "unfused":
            fw = (GemmShape(sq, s, d, b * heads), GemmShape(sq, d, s, b * heads))
            return self.gemms([x for g in fw for x in (_dgrad(g), _wgrad(g))] if backward else list(fw))
        # flash: the rank's queries against all keys, causal, in cp steps of (s / cp)^2 blocks
        flops = AttentionShape(b, heads, s, d).executed_flops / cp * (FLASH_BACKWARD_FLOPS if backward else 1.0)
        step = AttentionShape(b, heads, sq, d)
        return flops / (self.peak * attention_efficiency(self.dev, step, self.dtype, self.eff.flash_kernel,
                                                         self.table))


# ---------------------------------------------------------------- per-layer times
@dataclass(frozen=True)
class _Pass:
    compute_s: float = 0.0  # GEMMs and attention at their efficiencies
    mem: float = 0.0  # bytes of element-wise work
    collectives: float = 0  # tensor-parallel collectives of one activation each (all-reduce pairs)
    ring_s: float = 0.0  # context-parallel K/V transfers not hidden behind attention

    def __add__(self, o: _Pass) -> _Pass:
        return _Pass(self.compute_s + o.compute_s, self.mem + o.mem, self.collectives + o.collectives,
                     self.ring_s + o.ring_s)

    def scaled(self, x: float) -> _Pass:
        """The pass on a share ``x`` of the layers (recomputation on every N-th layer)."""
        return _Pass(x * self.compute_s, x * self.mem, x * self.collectives, x * self.ring_s)


def _recomputed(spec: TransformerSpec, plan: ParallelPlan, hw: SimHardware, timer: _Timer, fw: _Pass,
                att_f: float, mem: float) -> _Pass:
    """What a recomputed layer's backward runs again of its forward ``fw``: ``full`` all of it;
    ``selective`` the attention core (its products and softmax bytes); ``op`` the linears
    :func:`~stalesim.workloads.transformer.op_checkpoint_linears` does not save, every element-wise
    op (none is on torchtitan's save list), an unfused attention core, and with tensor parallelism
    the collectives not saved: under sequence parallelism the two all-gathers (the reduce-scatters
    are saved), half the forward's all-reduce pairs; without it the all-reduces."""
    n = plan.micro_batch * spec.seq // plan.cp
    t = plan.tp
    if plan.recompute == "full":
        return fw
    if plan.recompute == "selective":
        return _Pass(att_f, mem - _elementwise_bytes(spec, n, t, plan.sp, "flash"), 0,
                     cp_ring_s(spec, plan, hw, att_f, backward=False))
    if plan.recompute == "op":
        lin = [GemmShape(n, math.ceil(o / (1 if row else t)), math.ceil(i / (t if row else 1)))
               for o, i, row, saved in op_checkpoint_linears(spec) if not saved]
        core = att_f if spec.attention == "unfused" else 0.0
        return _Pass(timer.gemms(lin) + core, mem, (1 if plan.sp else 2) if t > 1 else 0,
                     cp_ring_s(spec, plan, hw, att_f, backward=False) if core else 0.0)
    return _Pass()


def _elementwise_bytes(spec: TransformerSpec, tokens: int, t: int, sp: bool, attention: str) -> float:
    """One layer's forward element-wise bytes per rank for ``tokens`` local tokens."""
    e, n = spec.element_bytes, tokens
    h, f, a, s = spec.hidden, spec.ffn_dim, spec.heads, spec.seq
    outer = 1 / t if sp else 1.0
    # norms (read + write), two residual adds with dropout (read 2, write 1, mask): outside the TP region
    mem = outer * (2 * 2 * e * n * h + 2 * (3 * e * n * h + (n * h if spec.dropout else 0)))
    # activation: GELU reads/writes f; SwiGLU reads gate and up, writes their product
    mem += (2 if spec.ffn_type == "gelu" else 3) * e * n * f / t
    if attention == "unfused":  # scale + mask + softmax (read, write), dropout (read, write, mask): every key
        mem += (2 * e + (2 * e + 1 if spec.dropout else 0)) * a * s * n / t
    return mem


def cp_ring_s(spec: TransformerSpec, plan: ParallelPlan, hw: SimHardware, attention_s: float,
              backward: bool) -> float:
    """Exposed seconds of one layer's K/V ring over ``plan.cp`` ranks (module doc): ``cp - 1`` steps,
    each ``max(0, message - attention_s / cp)``; the backward's message carries K, V, dK and dV."""
    cp = plan.cp
    if cp <= 1:
        return 0.0
    kv = spec.element_bytes * plan.micro_batch * (spec.seq // cp) * max(spec.head_dim, spec.kv_dim // plan.tp)
    nbytes = (4 if backward else 2) * kv
    c = hw.cluster  # rank hardware: a node holds node_size tensor-parallel groups
    if c is not None and cp > c.node_size:
        msg = (c.inter_latency_ns + c.serialize_ns(nbytes)) / NS
    else:
        msg = hw.p2p_ns(nbytes) / NS
    return (cp - 1) * max(0.0, msg - attention_s / cp)


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
    b, t, cp = plan.micro_batch, plan.tp, plan.cp
    if spec.seq % cp:
        raise StalesimError(f"cp: {cp} context-parallel ranks must divide the sequence length {spec.seq}")
    n = b * spec.seq // cp  # tokens of one micro-batch on one rank
    coll = hw.allreduce_ns(spec.layer_output_bytes(b) / cp, t) / NS if t > 1 else 0.0
    timer = _Timer(dev, spec.dtype, eff)
    bw_Bps = dev.mem_bandwidth_Bps * eff.memory

    def secs(p: _Pass, coll_s: float, kernels: float) -> float:
        return p.compute_s + p.mem / bw_Bps + p.collectives * coll_s + p.ring_s + kernels * eff.overhead_s

    lin = layer_gemms(spec, n, t)
    mem = _elementwise_bytes(spec, n, t, plan.sp, spec.attention)
    att_f = timer.attention(spec, b, t, cp, backward=False)
    att_b = timer.attention(spec, b, t, cp, backward=True)
    fw = _Pass(timer.gemms(lin) + att_f, mem, 2, cp_ring_s(spec, plan, hw, att_f, backward=False))
    w_s = timer.gemms([_wgrad(g) for g in lin])
    # backward: input and weight gradients, the element-wise work again with gradients (read saved +
    # grad, write grad: 2 x), the same collectives; with sequence parallelism one more all-gather
    # per column-parallel linear (QKV, MLP in): Megatron saves that linear's input unreplicated and
    # gathers it again for the weight gradient (LinearWithGradAccumulationAndAsyncCommunication), so
    # 2 + 2 + 2 half-size collectives (an all-gather or reduce-scatter is half an all-reduce)
    bw = _Pass(timer.gemms([_dgrad(g) for g in lin]) + w_s + att_b, 2 * mem, 3 if plan.sp else 2,
               cp_ring_s(spec, plan, hw, att_b, backward=True))
    rec = _recomputed(spec, plan, hw, timer, fw, att_f, mem)
    bw = bw + rec.scaled(plan.recomputed_share)
    # Megatron runs the input-gradient collective of each column-parallel linear (QKV, MLP in)
    # asynchronously while that linear's weight gradient computes: what the W GEMMs cover is hidden;
    # with sequence parallelism that collective is a reduce-scatter, and the input's second
    # all-gather runs while the input gradient computes; the row-parallel linears' output-gradient
    # all-gathers stay exposed
    hidden = 0.0
    if t > 1 and overlaps(plan).tp:
        colpar_w = timer.gemms([_wgrad(lin[0]), _wgrad(lin[2])])
        if plan.sp:
            colpar_d = timer.gemms([_dgrad(lin[0]), _dgrad(lin[2])])
            hidden = tp_backward_hidden_s(coll / 2, colpar_w) + tp_backward_hidden_s(coll / 2, colpar_d)
        else:
            hidden = tp_backward_hidden_s(coll, colpar_w)
    k = _KERNELS_PER_LAYER
    e = spec.element_bytes
    logits = GemmShape(n, math.ceil(spec.vocab / t), spec.hidden)
    # final norm + vocabulary-parallel logits + cross-entropy (fp32 softmax over V / t)
    hf = _Pass(timer.gemm(logits), 2 * e * n * spec.hidden + 3 * 4 * n * spec.vocab / t, 1)
    head_w = timer.gemm(_wgrad(logits))
    hb = _Pass(timer.gemm(_dgrad(logits)) + head_w, hf.mem, 1)
    # vocabulary-parallel embedding: a gather (writes b s h) and one all-reduce of it
    ef = _Pass(0.0, 2 * e * n * spec.hidden, 1 if t > 1 else 0)
    return LayerTimes(
        layer_f=secs(fw, coll, k),
        layer_b=secs(bw, coll, 2 * k + (k * plan.recomputed_share if plan.recompute in ("full", "op") else 0))
        - hidden,
        embed_f=secs(ef, coll, 1), embed_b=secs(ef, 0.0, 1),
        head_f=secs(hf, coll, 3), head_b=secs(hb, coll, 4),
        collective=coll,
        # W: one GEMM per weight matrix (dL/dW = x^T dy)
        layer_w=w_s + (4 if spec.ffn_type == "gelu" else 5) * eff.overhead_s,
        head_w=head_w + eff.overhead_s)


def layer_w_input_bytes(spec: TransformerSpec, b: int, t: int, sp: bool = False) -> float:
    """Bytes of a layer's saved activations that its deferred weight gradients (W) read per rank:
    the input of each linear (dL/dW = x^T dy). QKV and the MLP's first linear(s) read the norm
    outputs (``h`` each; split over ``t`` only with sequence parallelism), the output projection
    reads the attention output (``h / t``), the MLP's last linear its hidden activation (``f / t``).
    A runtime that frees the rest after the input-gradient pass I (the zero-bubble
    implementation) keeps only these and the output gradients (:func:`layer_wgrad_bytes`)."""
    h, f = spec.hidden, spec.ffn_dim
    outer = 2 * h / (t if sp else 1)
    return spec.element_bytes * b * spec.seq * (outer + h / t + f / t)


def layer_wgrad_bytes(spec: TransformerSpec, b: int, t: int) -> float:
    """Bytes a deferred weight gradient (W) keeps per layer and rank between its I and W: the
    output gradients of the layer's linears (QKV, output projection, MLP up/gate and down); their
    inputs are saved activations already."""
    h, k, f = spec.hidden, spec.kv_dim, spec.ffn_dim
    widths = (h + 2 * k) + h + (2 if spec.ffn_type == "swiglu" else 1) * f + h
    return spec.element_bytes * b * spec.seq * widths / t
