"""The range over open choices (stalesim.sim.llm_range): extremes over every candidate combination."""

import itertools
import time
from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.sim.llm_range import CANDIDATES, choice_range
from stalesim.sim.parallel import ParallelPlan, predict_llm
from stalesim.workloads.hardware import hardware_from_node
from stalesim.workloads.transformer import PRESETS

HW = hardware_from_node("dgx-h100")


def test_extremes_are_the_min_and_max_over_every_combination():
    spec = PRESETS["llama2-70b"]
    plan = ParallelPlan(tp=8, pp=4, dp=8, global_batch=256, schedule="interleaved-1f1b", chunks=2)
    rng = choice_range(spec, plan, HW, ("chunks", "micro_batch", "recompute"))
    assert rng.open == ("chunks", "micro_batch", "recompute")
    assert rng.point == {"chunks": 2, "micro_batch": 1, "recompute": "none"}
    # the same combinations by hand
    its, mems, bad = [], [], 0
    for v, b, r in itertools.product(CANDIDATES["chunks"], CANDIDATES["micro_batch"], CANDIDATES["recompute"]):
        try:
            p = predict_llm(spec, replace(plan, chunks=v, micro_batch=b, recompute=r), HW)
        except StalesimError:
            bad += 1
            continue
        its.append(p.iteration_s)
        mems.append(p.memory_bytes)
    assert rng.evaluated == len(its) and rng.not_applicable == bad and bad > 0
    assert rng.fastest.iteration_s == min(its) and rng.slowest.iteration_s == max(its)
    assert rng.least_memory.memory_bytes == min(mems) and rng.most_memory.memory_bytes == max(mems)
    point = predict_llm(spec, plan, HW)
    assert rng.fastest.iteration_s <= point.iteration_s <= rng.slowest.iteration_s
    # full recomputation costs a forward more: the slowest recomputes fully, the least memory too
    assert rng.slowest.choices["recompute"] == "full" and rng.least_memory.choices["recompute"] == "full"
    assert "the point is chunks 2, micro-batch 1, recompute none" in rng.summary()


def test_no_open_choice_and_non_interleaved_chunks():
    spec = PRESETS["llama2-70b"]
    plan = ParallelPlan(tp=8, pp=4, dp=8, global_batch=256)
    assert choice_range(spec, plan, HW, ()).summary().startswith("range over open choices: none left open")
    rng = choice_range(spec, plan, HW, ("chunks", "recompute"))
    assert rng.open == ("recompute",) and rng.evaluated == 4  # 1f1b has no depth to choose
    with pytest.raises(StalesimError, match="open_choices: 'v' is not one of"):
        choice_range(spec, plan, HW, ("v",))


def test_event_families_are_bounded_and_405b_answers_in_under_a_second():
    spec = PRESETS["llama3.1-405b"]
    zb = ParallelPlan(tp=8, pp=16, dp=64, global_batch=2048, schedule="zb-h1", sp=True,
                      stage_layers=(7,) + (8,) * 14 + (7,))
    rng = choice_range(spec, zb, HW, ("micro_batch", "recompute"))
    assert rng.evaluated == 0 and "event-simulated" in rng.summary()
    big = ParallelPlan(tp=8, pp=16, dp=64, global_batch=2048, schedule="interleaved-1f1b", chunks=2, sp=True,
                       stage_layers=(3,) + (4,) * 30 + (3,))
    t0 = time.perf_counter()
    rng = choice_range(spec, big, HW, ("chunks", "micro_batch", "recompute", "overlap"), first_last=True)
    assert time.perf_counter() - t0 < 1.0 and rng.evaluated > 10
    assert all(o is not None for o in (rng.fastest, rng.slowest, rng.least_memory, rng.most_memory))


def test_small_event_ranges_are_computed():
    from stalesim.workloads.transformer import TransformerSpec

    spec = TransformerSpec("tiny", layers=8, hidden=1024, heads=16, seq=512, vocab=8000)
    plan = ParallelPlan(pp=2, dp=1, global_batch=8, schedule="zb-h1")
    rng = choice_range(spec, plan, HW, ("micro_batch", "recompute"))
    assert rng.skipped_reason is None and rng.evaluated == 4 * 4 and rng.not_applicable == 4  # b = 16 > 8
    assert rng.fastest.iteration_s <= predict_llm(spec, plan, HW).iteration_s <= rng.slowest.iteration_s


def test_overlap_off_blocks_the_pipeline_transfers_too():
    """``overlap`` off turns every switch off, the pipeline transfers included: Megatron's interleaved
    1F1B (overlapped by default) is slower with them blocking, and the range's slowest is that plan."""
    spec = PRESETS["llama2-70b"]
    plan = ParallelPlan(tp=8, pp=4, dp=8, global_batch=256, schedule="interleaved-1f1b", chunks=2)
    rng = choice_range(spec, plan, HW, ("overlap",))
    off = replace(plan, tp_overlap=False, dp_overlap=False, zero_prefetch=False, p2p_overlap=False)
    assert rng.slowest is not None and rng.slowest.choices == {"overlap": "off"}
    assert rng.slowest.iteration_s == predict_llm(spec, off, HW).iteration_s
    assert rng.slowest.iteration_s > predict_llm(spec, replace(off, p2p_overlap=None), HW).iteration_s
