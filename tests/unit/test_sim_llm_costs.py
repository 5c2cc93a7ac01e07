"""llm_costs' stage split (even, an explicit list, first-last) and context parallelism's share per GPU."""

from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.sim.llm_costs import first_last_layers, llm_costs, stage_layers
from stalesim.sim.parallel import ParallelPlan, predict_llm
from stalesim.workloads.hardware import hardware_from_node
from stalesim.workloads.transformer import PRESETS, TransformerSpec, layer_activation_bytes

HW = hardware_from_node("dgx-h100")
L405 = PRESETS["llama3.1-405b"]


def test_first_last_is_megatrons_embedding_and_loss_as_a_layer():
    # 126 + 2 slots over 16 stages: 8 each, the first and last give one to the embedding / loss
    assert first_last_layers(126, 16) == (7,) + (8,) * 14 + (7,)
    assert first_last_layers(70, 12) == (5,) + (6,) * 10 + (5,)
    assert first_last_layers(30, 1) == (30,)
    assert sum(first_last_layers(94, 16)) == 94
    with pytest.raises(StalesimError, match="stage_layers: first-last needs layers \\+ 2 = 73"):
        first_last_layers(71, 12)
    with pytest.raises(StalesimError, match="at least 2"):
        first_last_layers(2, 4)


def test_stage_costs_follow_an_uneven_split():
    split = first_last_layers(126, 16)
    plan = ParallelPlan(tp=8, pp=16, dp=8, global_batch=512, sp=True, stage_layers=split)
    costs, _sim, lt = llm_costs(L405, plan, HW)
    assert stage_layers(L405, plan) == list(split)
    assert costs.layer_ranges[0] == (0, 7) and costs.layer_ranges[1] == (7, 15) and costs.layer_ranges[-1] == (119, 126)
    act = layer_activation_bytes(L405, 1, tp=8, sp=True)
    assert costs.saved_bytes[1] == round(8 * act) and costs.saved_bytes[5] == round(8 * act)
    assert costs.saved_bytes[0] == round(7 * act)
    # a middle stage: 8 layers' weights; the first: 7 layers + the embedding
    w = plan.full_state.weights
    assert costs.param_bytes[1] == round(8 * L405.layer_params() / 8 * w)
    assert costs.param_bytes[0] == round((7 * L405.layer_params() + L405.embedding_params()) / 8 * w)
    assert costs.f_ns[2] == costs.f_ns[1]  # same layer count, same time
    # an explicit list: the time and memory follow it
    tilted = (9,) + (8,) * 14 + (5,)
    c2, _s, _l = llm_costs(L405, replace(plan, stage_layers=tilted), HW)
    assert c2.param_bytes[0] > costs.param_bytes[0] and c2.f_ns[0] > costs.f_ns[0]
    assert c2.saved_bytes[-1] < costs.saved_bytes[-1]


def test_uneven_split_moves_the_worst_device():
    """Even: 128 layers, 8 per stage, stage 0 also holds the embedding and the most in-flight
    micro-batches; first-last takes a layer off it, so its memory falls."""
    spec = L405.with_(layers=126)
    base = ParallelPlan(tp=8, pp=16, dp=8, global_batch=512, sp=True, recompute="full")
    split = predict_llm(spec, replace(base, stage_layers=first_last_layers(126, 16)), HW)
    manual = predict_llm(spec, replace(base, stage_layers=(8,) + (8,) * 14 + (6,)), HW)
    assert manual.memory_stage == 0 and manual.memory_bytes > split.memory_bytes


@pytest.mark.parametrize("kw,needle", [
    ({"stage_layers": (8,) * 15}, "stage_layers: 15 entries for pp x chunks = 16 stages"),
    ({"stage_layers": (8,) * 15 + (7,)}, "stage_layers: " + "8+" * 15 + "7 = 127 layers, the model has 126"),
    # only the first and last stage may be empty (layer padding); a middle one may not
    ({"stage_layers": (9,) * 7 + (0,) + (9,) * 7 + (0,)}, "stage_layers: expected an integer >= 1, got 0"),
    ({}, "pp: 126 layers do not split into pp x chunks = 16 equal stages (give stage_layers"),
    ({"stage_layers": first_last_layers(126, 16), "cp": 3}, "cp: sequence 8192 does not split into 2 x cp = 6"),
])
def test_bad_splits_and_cp_are_one_line(kw, needle):
    plan = ParallelPlan(tp=8, pp=16, dp=8, global_batch=512, **kw)
    with pytest.raises(StalesimError) as exc:
        llm_costs(L405, plan, HW)
    assert needle in str(exc.value)


def test_context_parallel_splits_activations_messages_and_logits():
    spec = TransformerSpec("t", layers=8, hidden=1024, heads=16, kv_heads=4, ffn=2816, ffn_type="swiglu",
                           seq=8192, vocab=32000, norm="rmsnorm", bias=False, tied_embeddings=False,
                           learned_positions=False, dropout=False, attention="flash")
    one = ParallelPlan(tp=2, pp=2, dp=2, global_batch=8)
    four = replace(one, cp=4)
    c1, _a, _b = llm_costs(spec, one, HW)
    c4, _c, _d = llm_costs(spec, four, HW)
    assert four.gpus == 4 * one.gpus == 32
    assert c4.saved_bytes[0] == pytest.approx(c1.saved_bytes[0] / 4, abs=1)
    assert c4.saved_bytes[-1] == pytest.approx(c1.saved_bytes[-1] / 4, abs=1)  # fp32 logits too
    assert c4.msg_bytes[0] == c1.msg_bytes[0] // 4
    assert c4.param_bytes == c1.param_bytes  # cp ranks hold the whole stage's weights


def test_zero_bubble_activations_keep_only_what_w_reads():
    """The zero-bubble implementation frees after I what W does not read (each linear's input and
    output gradient stay): ZB-H1 then holds 1F1B's activation memory (Qi et al. 2024: 1x), where
    keeping the whole set until W gave 1.27x on this setting; ZB-H2 holds about (2p - 1)/p x."""
    from stalesim.sim.llm_kernels import layer_w_input_bytes
    from stalesim.sim.parallel import ParallelPlan, llm_costs, predict_llm
    from stalesim.workloads.hardware import hardware_from_node
    from stalesim.workloads.transformer import get_preset

    hw, spec = hardware_from_node("dgx-h100"), get_preset("llama2-70b")
    acts = {s: predict_llm(spec, ParallelPlan(tp=8, pp=8, global_batch=32, schedule=s), hw).memory_breakdown[
        "activations"] for s in ("1f1b", "zb-h1", "zb-h2")}
    assert acts["zb-h1"] == pytest.approx(acts["1f1b"], rel=0.01)
    assert 1.7 < acts["zb-h2"] / acts["1f1b"] < 2.0
    costs, _sim, _lt = llm_costs(spec, ParallelPlan(tp=8, pp=8, global_batch=32, schedule="zb-h1"), hw)
    per_layer = layer_w_input_bytes(spec, 1, 8)
    # 2 h (norm outputs) + h / t + f / t per token, 10 layers on stage 0
    assert per_layer == 2 * 4096 * (2 * 8192 + 8192 / 8 + 28672 / 8)
    assert costs.w_input_bytes[0] == round(10 * per_layer)
    assert costs.w_input_bytes[0] < costs.saved_bytes[0]
