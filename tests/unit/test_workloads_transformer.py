"""Analytic transformer counts vs. a built model, the papers' closed forms, and the presets."""

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.workloads.transformer import (
    PRESETS,
    TransformerSpec,
    get_preset,
    layer_activation_bytes,
    narayanan_flops,
    transformer_profile,
)


def _char_spec(n_layer: int, n_embd: int, n_head: int, block: int) -> TransformerSpec:
    # gpt-char: GELU MLP 4x, LayerNorm, biases, learned positions, untied head, 128 ASCII ids
    return TransformerSpec("gpt-char", layers=n_layer, hidden=n_embd, heads=n_head, seq=block, vocab=128,
                           dtype="float32", tied_embeddings=False, dropout=False)


def test_counts_equal_a_built_gpt_char():
    """Parameters and forward FLOPs per block equal torch's count exactly: FlopCounterMode
    counts matrix multiplies and attention (torch's sdpa formula, the full square), and the
    analytic model counts exactly those; what neither counts (norms, GELU, softmax, bias
    adds, the embedding gather) is left out of both, so tolerance 0. The backward differs by
    one known term: torch's flash-attention backward recomputes QK^T (+2 b s^2 h per layer),
    which the analytic backward (2 x forward, no recomputation) leaves to ``recompute``."""
    from stalesim.workloads.flops import flop_counter
    from stalesim.workloads.zoo import build_model

    L, C, H, T, b = 2, 64, 4, 32, 3
    spec = _char_spec(L, C, H, T)
    m = build_model(f"gpt-char:n_layer={L},n_embd={C},n_head={H},block_size={T}", seed=0)
    blocks = list(m.blocks)
    params = [sum(p.numel() for p in blk.parameters()) for blk in blocks]
    assert params == [spec.embedding_params()] + [spec.layer_params()] * L + [spec.head_params()]
    assert sum(params) == spec.params()
    x = torch.randint(0, 128, (b, T))
    fwd, bwd = [], []
    for blk in blocks:
        xin = x.detach().requires_grad_(x.is_floating_point())
        c = flop_counter()
        with c:
            y = blk(xin)
        fwd.append(c.get_total_flops())
        c = flop_counter()
        with c:
            y.backward(torch.ones_like(y))
        bwd.append(c.get_total_flops())
        x = y.detach()
    assert fwd == [0] + [spec.layer_flops(b)] * L + [spec.logits_flops(b)]
    recomputed_scores = spec.layer_attention_flops(b) // 2
    assert bwd == [0] + [2 * spec.layer_flops(b) + recomputed_scores] * L + [2 * spec.logits_flops(b)]
    prof = transformer_profile(spec, b)
    assert [lp.flops for lp in prof.layers] == fwd
    assert [lp.backward_flops for lp in prof.layers] == [0] + [2 * spec.layer_flops(b)] * L + [bwd[-1]]
    assert [lp.param_bytes for lp in prof.layers] == [4 * p for p in params]


def test_narayanan_equation_3_is_the_sum_of_the_terms():
    for name in ("megatron-1.7b", "megatron-145.6b", "megatron-1t", "gpt3-175b"):
        s = PRESETS[name]
        assert s.model_flops(16, recompute="full") == pytest.approx(narayanan_flops(s, 16), rel=1e-12)
    s = PRESETS["megatron-1t"]
    # equation (2): P = 12 l h^2 (1 + 13/12h + (V + s)/12lh) with a tied head; it leaves out the
    # final LayerNorm (2h), which the analytic count has
    n, h = s.layers, s.hidden
    P = 2 * h + 12 * n * h ** 2 * (1 + 13 / (12 * h) + (s.vocab + s.seq) / (12 * n * h))
    assert s.params() == pytest.approx(P, rel=1e-9) and s.params() == pytest.approx(1008.0e9, rel=2e-3)


@pytest.mark.parametrize("name,billions", [
    ("megatron-1.7b", 1.7), ("megatron-3.6b", 3.6), ("megatron-7.5b", 7.5), ("megatron-18.4b", 18.4),
    ("megatron-39.1b", 39.1), ("megatron-76.1b", 76.1), ("megatron-145.6b", 145.6),
    ("megatron-310.1b", 310.1), ("megatron-529.6b", 529.6), ("llama2-7b", 6.74), ("llama2-13b", 13.0),
    ("llama2-70b", 69.0), ("llama3-8b", 8.03), ("llama3-70b", 70.6), ("gpt3-175b", 175.0),
    # Llama 3.1 and Mistral: the released checkpoints' parameter counts (8,030,261,248;
    # 70,553,706,496; 405,853,388,800; 7,241,732,096); Qwen2-72B 72.71 B (its Q/K/V biases left
    # out); BLOOM 176.25 B (BigScience 2022); OPT "175B"; Korthikanti et al.'s "22B"
    ("llama3.1-8b", 8.030), ("llama3.1-70b", 70.554), ("llama3.1-405b", 405.853), ("mistral-7b", 7.242),
    ("qwen2-72b", 72.71), ("bloom-176b", 176.25), ("opt-175b", 175.0), ("megatron-22b", 22.0)])
def test_preset_parameter_counts(name, billions):
    # published to one decimal (Narayanan et al. Table 1: 1.65 B is "1.7"), else within 2%
    assert PRESETS[name].params() / 1e9 == pytest.approx(billions, rel=0.02, abs=0.051)


def test_released_llama_and_mistral_counts_are_exact():
    """The released checkpoints' exact parameter counts: embedding, 126 (or 32/80) layers of GQA
    + SwiGLU + 2 RMSNorms, final norm, untied head: nothing left out, nothing added."""
    assert PRESETS["llama3.1-8b"].params() == 8_030_261_248
    assert PRESETS["llama3.1-70b"].params() == 70_553_706_496
    assert PRESETS["llama3.1-405b"].params() == 405_853_388_800
    assert PRESETS["mistral-7b"].params() == 7_241_732_096


def test_context_parallel_splits_every_activation_term():
    """cp ranks each keep 1/cp of the sequence's tokens (scores: s/cp rows of s keys), so each
    recomputation mode's bytes are divided by cp exactly; a bad cp is one line naming it."""
    for name in ("gpt3-175b", "llama3.1-405b"):
        s = PRESETS[name]
        for rec in ("none", "selective", "full"):
            one = layer_activation_bytes(s, 2, tp=8, sp=True, recompute=rec)
            assert layer_activation_bytes(s, 2, tp=8, sp=True, recompute=rec, cp=4) == pytest.approx(one / 4)
    with pytest.raises(StalesimError, match="cp: expected an integer >= 1"):
        layer_activation_bytes(PRESETS["gpt3-175b"], 1, cp=0)


def test_korthikanti_closed_forms():
    """Korthikanti et al. 2022, Table 2 (per layer, 16-bit, dropout): the tensor-by-tensor
    derivation equals their closed forms exactly."""
    s = PRESETS["gpt3-175b"]
    b, t = 2, 8
    S, h, a = s.seq, s.hidden, s.heads
    sbh = S * b * h
    assert layer_activation_bytes(s, b) == pytest.approx(sbh * (34 + 5 * a * S / h))
    assert layer_activation_bytes(s, b, tp=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * S / (h * t)))
    assert layer_activation_bytes(s, b, tp=t, sp=True) == pytest.approx(sbh * (34 / t + 5 * a * S / (h * t)))
    assert layer_activation_bytes(s, b, tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert layer_activation_bytes(s, b, tp=t, sp=True, recompute="selective") == pytest.approx(34 * sbh / t)
    assert layer_activation_bytes(s, b, tp=t, recompute="full") == pytest.approx(2 * sbh)
    # GQA + SwiGLU + flash + no dropout: the terms, not GPT's constants
    ll = PRESETS["llama2-70b"]
    n, e = b * ll.seq, 2
    expect = 4 * e * n * ll.hidden + e * n * (2 * ll.hidden + 2 * ll.kv_dim) + 3 * e * n * ll.ffn_dim + 4 * ll.heads * n
    assert layer_activation_bytes(ll, b) == pytest.approx(expect)


def test_profile_retimes_and_presets_are_validated():
    spec = get_preset("Llama2-7B")
    p = transformer_profile(spec, 1, "h100-sxm")
    assert p.is_roofline and p.layers[1].forward_s > 0
    p4 = p.at_batch_size(4)
    assert p4.layers[1].flops == 4 * p.layers[1].flops and p4.layers[1].forward_s > p.layers[1].forward_s
    with pytest.raises(StalesimError, match="workload: unknown 'gpt-9'"):
        get_preset("gpt-9")
    with pytest.raises(StalesimError, match="kv_heads: 3 must"):
        spec.with_(kv_heads=3)
    with pytest.raises(StalesimError, match="recompute: expected"):
        layer_activation_bytes(spec, 1, recompute="some")
    with pytest.raises(StalesimError, match="layers: 1073741824 is larger than this tool handles"):
        spec.with_(layers=1 << 30)
    with pytest.raises(StalesimError, match="bias: expected true or false"):
        spec.with_(bias="no")


def test_op_level_checkpointing_keeps_every_other_matmul_of_a_llama_block():
    """torchtitan's per-op policy on its Llama block: wq, wv, w1, w2 keep their outputs, wk, wo, w3
    are recomputed; the block input and the fused attention's output and log-sum-exp stay."""
    from stalesim.workloads.transformer import op_checkpoint_linears

    s = get_preset("llama3-8b")
    h, k, f, a, n, e = 4096, 1024, 14336, 32, 8192, 2
    assert [saved for *_x, saved in op_checkpoint_linears(s)] == [True, False, True, False, True, False, True]
    assert layer_activation_bytes(s, 1, recompute="op") == e * n * (h + h + k + f + h + h) + 4 * a * n
    # tensor x sequence parallel 8: column-parallel outputs split, the row-parallel w2 keeps its
    # full-width partial sum, the two reduce-scatters' outputs are saved
    t = 8
    want = e * n * (h / t + h / t + k / t + f / t + h + h / t) + 4 * a * n / t + 2 * e * n * h / t
    assert layer_activation_bytes(s, 1, tp=t, sp=True, recompute="op") == pytest.approx(want)
    # between selective (Korthikanti's: nothing to drop under flash) and full
    assert layer_activation_bytes(s, 1, recompute="full") < layer_activation_bytes(s, 1, recompute="op") \
        < layer_activation_bytes(s, 1, recompute="selective")


def test_op_level_and_every_nth_layer_recompute_flops():
    s = get_preset("llama3-8b")
    h, k, f, n = 4096, 1024, 14336, 8192
    base = s.model_flops(1)
    assert s.model_flops(1, recompute="op") - base == s.layers * 2 * n * (h * k + h * h + h * f)
    assert s.model_flops(1, recompute="full", every=2) - base == s.layers // 2 * s.layer_flops(1)
    assert s.model_flops(1, recompute="full", every=1) == s.model_flops(1, recompute="full")
    gpt = get_preset("gpt3-175b")  # GELU: q, v and the up projection kept; k, o and down recomputed
    hh = gpt.hidden
    assert gpt.model_flops(1, recompute="op") - gpt.model_flops(1) == \
        gpt.layers * (2 * gpt.seq * (hh * hh + hh * hh + 4 * hh * hh) + gpt.layer_attention_flops(1))
