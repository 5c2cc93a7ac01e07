"""The automatic zero-bubble schedules' memory limit (``ParallelPlan.pending_limit``) and the
padded first/last stages of Megatron-LM's layer padding, in the LLM estimate.

ZB-1p / ZB-2p (Qi et al., ICLR 2024, section 3.1) fill the warm-up with as many forwards as the
limit on pending micro-batches allows, so a stage's activations reach ``limit`` whole records;
the handcrafted ZB-H1 / ZB-H2 orders that time them hold fewer on the later stages.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.plan.llm import rank_key
from stalesim.sim.llm_costs import llm_costs
from stalesim.sim.llm_plan import ParallelPlan
from stalesim.sim.parallel import pending_limit_activations, predict_llm
from stalesim.workloads.hardware import hardware_from_node
from stalesim.workloads.transformer import TransformerSpec

TINY = TransformerSpec("tiny", layers=14, hidden=512, heads=8, seq=256, vocab=4000, dtype="float16")
A100 = hardware_from_node("dgx-a100")
# 4 stages, one layer fewer on the first and last (the paper's split), 8 micro-batches
BASE = ParallelPlan(pp=4, micro_batch=2, global_batch=16, schedule="zb-h1", stage_layers=(3, 4, 4, 3))


def test_the_limit_fills_the_heaviest_stage_with_whole_records():
    costs, _sim, _lt = llm_costs(TINY, BASE, A100)
    devices = [[0], [1], [2], [3]]
    got = pending_limit_activations(costs, devices, 4, 8)
    assert got == [4.0 * costs.saved_bytes[s] for s in range(4)]
    # fewer micro-batches than the limit: only those exist
    assert pending_limit_activations(costs, devices, 16, 8) == [8.0 * costs.saved_bytes[s] for s in range(4)]
    # a middle stage (4 layers) holds more than the first (3 layers and the embedding's input only)
    assert got[1] > got[0]


def test_zb_1p_and_2p_memory_against_the_handcrafted_orders():
    h1 = predict_llm(TINY, BASE, A100)
    p1 = predict_llm(TINY, replace(BASE, pending_limit=4), A100)
    h2 = predict_llm(TINY, replace(BASE, schedule="zb-h2"), A100)
    p2 = predict_llm(TINY, replace(BASE, schedule="zb-h2", pending_limit=8), A100)
    costs, _sim, _lt = llm_costs(TINY, BASE, A100)
    heaviest = max(costs.saved_bytes)
    assert p1.memory_breakdown["activations"] == round(4 * heaviest)
    assert p2.memory_breakdown["activations"] == round(8 * heaviest)
    # the limit's records are whole: at least what the handcrafted order holds
    assert p1.memory_breakdown["activations"] >= h1.memory_breakdown["activations"]
    assert p2.memory_breakdown["activations"] > h2.memory_breakdown["activations"]
    # the time is the handcrafted order's: the limit changes memory only
    assert p1.iteration_s == h1.iteration_s and p2.iteration_s == h2.iteration_s


@pytest.mark.parametrize("changes, needle", [
    ({"schedule": "1f1b", "pending_limit": 4}, "pending_limit: bounds the pending W"),
    ({"schedule": "zb-v", "chunks": 2, "stage_layers": None, "pending_limit": 4}, "not zb-v"),
    ({"pending_limit": 0}, "pending_limit"),
])
def test_a_limit_that_cannot_apply_is_a_one_line_error(changes, needle):
    plan = replace(BASE, **changes)
    spec = replace(TINY, layers=16) if changes.get("schedule") == "zb-v" else TINY
    with pytest.raises(StalesimError, match=needle) as e:
        predict_llm(spec, plan, A100)
    assert "\n" not in str(e.value)


def test_padding_empties_only_the_first_and_last_stage():
    """Megatron-LM's layer padding (the zero-bubble fork's --allow-padding-num-layers) gives one
    layer per virtual stage with the first and the last chunk empty: 14 layers on 4 devices x 4."""
    plan = ParallelPlan(pp=4, micro_batch=2, global_batch=16, schedule="interleaved-1f1b", chunks=4,
                        stage_layers=(0,) + (1,) * 14 + (0,))
    p = predict_llm(TINY, plan, A100)
    assert p.iteration_s > 0 and p.fits
    # the empty first stage still runs the embedding: its forward is not free
    assert 0 < p.stage_forward_s[0] < p.stage_forward_s[1]
    # 14 layers still, but a middle stage left empty: refused (only padding empties a stage)
    with pytest.raises(StalesimError, match="stage_layers"):
        predict_llm(TINY, replace(plan, stage_layers=(1,) * 7 + (0,) + (1,) * 7 + (0,)), A100)


def test_the_rank_puts_fitting_candidates_first_then_by_time():
    keys = [rank_key(None, True, 2.0), rank_key(None, False, 1.0), rank_key("cannot", None, None),
            rank_key(None, True, 1.5)]
    assert sorted(range(4), key=lambda i: keys[i]) == [3, 0, 1, 2]
