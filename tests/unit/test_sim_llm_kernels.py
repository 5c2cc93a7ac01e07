"""Per-layer seconds: GEMMs and attention by shape, the one-constant override, context parallelism's ring."""

from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.sim.llm_comm import rank_hardware
from stalesim.sim.llm_kernels import (
    CONSTANT_EFFICIENCY,
    SHAPE_EFFICIENCY,
    KernelEfficiency,
    cp_ring_s,
    layer_gemms,
    layer_times,
)
from stalesim.sim.llm_plan import ParallelPlan
from stalesim.sim.model import NS, SimHardware
from stalesim.workloads.hardware import get_device, hardware_from_node
from stalesim.workloads.kernel_efficiency import GemmShape, KernelTable, gemm_efficiency
from stalesim.workloads.transformer import get_preset

H100 = get_device("h100-sxm")
GPT = get_preset("megatron-18.4b")  # h 6144, 48 heads, GELU, unfused attention
IDEAL = SimHardware.ideal()


def _times(spec=GPT, eff=SHAPE_EFFICIENCY, hw=IDEAL, dev=H100, **plan):
    p = ParallelPlan(**plan)
    return layer_times(spec, p, dev, hw, eff)


def test_gemm_shapes_sum_to_the_layers_flops():
    for name in ("megatron-18.4b", "llama2-70b", "llama2-7b"):  # GELU; SwiGLU with GQA; SwiGLU
        spec = get_preset(name)
        for t in (1, 2, 8):
            flops = sum(g.flops for g in layer_gemms(spec, 3 * spec.seq, t))
            assert flops == spec.layer_gemm_flops(3) // t, (name, t)


def test_micro_batch_changes_the_fraction_of_peak_by_shape():
    """The by-shape model: micro-batch 16 fills the SMs better than 1 (tp = 8 slices), so its time per
    sequence is lower; the constant model charges both the same per sequence."""
    one = _times(micro_batch=1, tp=8, eff=replace(SHAPE_EFFICIENCY, overhead_s=0.0))
    sixteen = _times(micro_batch=16, tp=8, eff=replace(SHAPE_EFFICIENCY, overhead_s=0.0))
    assert sixteen.layer_f / 16 < 0.97 * one.layer_f
    # the weight gradients' output (the weights' shape) is the same at every micro-batch: the tokens
    # are their inner dimension, so they fill the SMs alike
    assert sixteen.layer_w / 16 == pytest.approx(one.layer_w, rel=0.01)
    g1, g16 = (gemm_efficiency(H100, layer_gemms(GPT, b * GPT.seq, 8)[1]) for b in (1, 16))
    assert g16 > g1 + 0.01
    c1 = _times(micro_batch=1, tp=8, eff=replace(CONSTANT_EFFICIENCY, overhead_s=0.0))
    c16 = _times(micro_batch=16, tp=8, eff=replace(CONSTANT_EFFICIENCY, overhead_s=0.0))
    assert c16.layer_f == pytest.approx(16 * c1.layer_f, rel=1e-12)
    assert c16.layer_b == pytest.approx(16 * c1.layer_b, rel=1e-12)


def test_constant_model_is_flops_over_the_fixed_fraction():
    """With gemm/attention set, the weight-gradient part is the forward GEMM FLOPs at that fraction."""
    eff = replace(CONSTANT_EFFICIENCY, overhead_s=0.0)
    lt = _times(tp=2, eff=eff)
    peak = H100.flops_per_s("bfloat16")
    assert lt.layer_w == pytest.approx(GPT.layer_gemm_flops(1) / 2 / (peak * 0.70), rel=1e-12)
    assert lt.head_w == pytest.approx(GPT.logits_flops(1) / 2 / (peak * 0.70), rel=1e-12)


def test_by_shape_is_slower_than_the_ceiling_and_faster_than_nothing():
    eff = replace(SHAPE_EFFICIENCY, overhead_s=0.0)
    lt = _times(tp=8, micro_batch=1, eff=eff)
    peak = H100.flops_per_s("bfloat16")
    ideal_w = GPT.layer_gemm_flops(1) / 8 / peak
    assert ideal_w / 0.803 < lt.layer_w < ideal_w / 0.5  # the H100 ceiling bounds it from below


def test_a_measured_table_sets_the_level_at_its_shapes():
    g = layer_gemms(GPT, GPT.seq, 8)[0]
    table = KernelTable("test GPU", "h100-sxm", "bfloat16", gemm=((g.m, g.n, g.k, 1, 0.5),))
    assert gemm_efficiency(H100, g, table=table) == pytest.approx(0.5)
    # between shapes: the measured level, times the model's shape ratio
    other = GemmShape(2 * g.m, g.n, g.k)
    ratio = gemm_efficiency(H100, other) / gemm_efficiency(H100, g)
    assert gemm_efficiency(H100, other, table=table) == pytest.approx(min(1.0, 0.5 * ratio))
    slow = _times(tp=8, eff=replace(SHAPE_EFFICIENCY, table=table, overhead_s=0.0))
    fast = _times(tp=8, eff=replace(SHAPE_EFFICIENCY, overhead_s=0.0))
    # every GEMM moves by the measured level over the model's at the measured shape
    assert slow.layer_w == pytest.approx(fast.layer_w * gemm_efficiency(H100, g) / 0.5, rel=1e-9)
    assert slow.layer_f > fast.layer_f


def test_flash_attention_is_faster_than_unfused_for_causal_blocks():
    flash = get_preset("megatron-18.4b").with_(attention="flash")
    eff = replace(SHAPE_EFFICIENCY, overhead_s=0.0, memory=1.0)
    f, u = _times(spec=flash, eff=eff, tp=8), _times(spec=GPT, eff=eff, tp=8)
    assert f.layer_f < u.layer_f


def test_context_parallel_halves_the_work_on_an_ideal_link():
    eff = replace(CONSTANT_EFFICIENCY, overhead_s=0.0)
    one, two = _times(eff=eff, cp=1), _times(eff=eff, cp=2)
    for field in ("layer_f", "layer_b", "layer_w", "head_f", "embed_f"):
        assert getattr(two, field) == pytest.approx(getattr(one, field) / 2, rel=1e-12), field


def test_context_parallel_ring_exposes_what_attention_does_not_hide():
    """cp - 1 steps of max(0, message - attention / cp); over the network once tp x cp exceed a node."""
    spec = get_preset("megatron-18.4b").with_(attention="flash", seq=8192)
    hw = hardware_from_node("dgx-h100")
    eff = replace(SHAPE_EFFICIENCY, overhead_s=0.0)
    plan = ParallelPlan(tp=4, cp=2)
    sim = rank_hardware(hw, plan.tp)
    kv = 2 * spec.element_bytes * 1 * (8192 // 2) * (spec.kv_dim // 4)
    msg = sim.p2p_ns(kv) / NS
    assert cp_ring_s(spec, plan, sim, 0.0, backward=False) == pytest.approx(msg)
    assert cp_ring_s(spec, plan, sim, 2 * msg, backward=False) == 0.0  # hidden behind the attention
    # the backward's message carries K, V and their gradients
    assert cp_ring_s(spec, plan, sim, 0.0, backward=True) == pytest.approx(sim.p2p_ns(2 * kv) / NS)
    # tp x cp = 16 > 8 GPUs of a node: the ring crosses the network, slower than NVLink
    wide = ParallelPlan(tp=4, cp=4)
    c = sim.cluster
    kv4 = 2 * spec.element_bytes * (8192 // 4) * (spec.kv_dim // 4)
    assert cp_ring_s(spec, wide, sim, 0.0, backward=False) == pytest.approx(
        3 * (c.inter_latency_ns + c.serialize_ns(kv4)) / NS)
    with_ring = layer_times(spec, wide, H100, sim, eff)
    no_ring = layer_times(spec, wide, H100, IDEAL, eff)
    assert with_ring.layer_f > no_ring.layer_f


def test_bad_settings_are_one_line_errors():
    with pytest.raises(StalesimError, match="^gemm:"):
        KernelEfficiency(gemm=1.5)
    with pytest.raises(StalesimError, match="^flash_kernel:"):
        KernelEfficiency(flash_kernel="fa9")
    with pytest.raises(StalesimError, match="^cp:"):
        _times(spec=GPT.with_(seq=2049), cp=2)
    assert "gemm" not in SHAPE_EFFICIENCY.to_dict() and CONSTANT_EFFICIENCY.to_dict()["gemm"] == 0.70


def test_op_and_every_nth_layer_recomputation_order_the_backward_times():
    """op recomputes a part of the forward (less than full, more than none); recomputing every
    second layer costs the average of the mode's and no recomputation's backward."""
    from stalesim.sim.llm_comm import rank_hardware
    from stalesim.sim.llm_kernels import layer_times
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import hardware_from_node
    from stalesim.workloads.transformer import PRESETS

    spec, hw = PRESETS["llama3-8b"], hardware_from_node("dgx-h100")
    sim = rank_hardware(hw, 1)

    def b(**kw):
        return layer_times(spec, ParallelPlan(dp=8, **kw), hw.device, sim).layer_b

    none, op, full = b(), b(recompute="op"), b(recompute="full")
    assert none < op < full
    assert b(recompute="full", recompute_every=2) == pytest.approx((none + full) / 2, rel=1e-12)


def test_every_nth_layer_needs_a_recomputation():
    from stalesim.errors import StalesimError
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.transformer import PRESETS

    with pytest.raises(StalesimError, match="recompute_every: 2 needs a recomputation other than none"):
        ParallelPlan(dp=8, recompute_every=2).check(PRESETS["llama3-8b"])
    with pytest.raises(StalesimError, match="recompute_every"):
        ParallelPlan(dp=8, recompute="full", recompute_every=0).check(PRESETS["llama3-8b"])
