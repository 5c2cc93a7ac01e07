"""ZeRO-2/3 (FSDP-style sharding) timed, not only counted: the per-micro-batch reduce-scatters and
all-gathers in the stage costs, the end-of-batch collective, the event simulation of the same costs,
and the sharded memory, against hand-computed values."""

import math

import pytest

from stalesim.errors import StalesimError
from stalesim.schedule import ScheduleConfig
from stalesim.sim import simulate
from stalesim.sim.llm_memory import plan_state
from stalesim.sim.parallel import ParallelPlan, llm_costs, predict_llm, sim_options
from stalesim.workloads.hardware import hardware_from_catalog, hardware_from_node
from stalesim.workloads.transformer import TransformerSpec

TINY = TransformerSpec("tiny", layers=8, hidden=1024, heads=16, seq=512, vocab=8000)
# one node of H100s on NVLink 4, NCCL's ring over P ranks: (P - 1) steps of max(3 us, NCCL's 3.4 us
# NVLink hop) + its 8.4 us base; (P - 1) / P x n at 450 GB/s (an all-reduce: twice the steps and bytes)
HW = hardware_from_catalog("h100-sxm", "nvlink4")
P, M = 4, 2


def _ring(nbytes: float, p: int = P, twice: int = 1) -> float:
    return 8.4e-6 + twice * (p - 1) * 3.4e-6 + twice * (p - 1) / p * nbytes / 450e9


def _plan(zero: int, global_batch: int = P * M) -> ParallelPlan:
    # DeepSpeed's ZeRO, nothing overlapped: every collective is on the critical path
    return ParallelPlan(tp=1, pp=1, dp=P, micro_batch=1, global_batch=global_batch, zero=zero,
                        framework="deepspeed", dp_overlap=False, zero_prefetch=False)


def test_zero_collectives_by_hand():
    """Stage 1: the end of the batch reduce-scatters the gradients and all-gathers the updated
    weights (one 5e8-element bucket each). Stage 2: each of the M backwards reduce-scatters the
    gradients, the end all-gathers the weights. Stage 3: each forward and each backward
    all-gathers the weights in 5e7-element prefetch buckets (ceil(psi / 2 / 5e7) calls), each
    backward reduce-scatters, nothing at the end."""
    c1, _, _ = llm_costs(TINY, _plan(1), HW)
    c2, _, _ = llm_costs(TINY, _plan(2), HW)
    c3, _, _ = llm_costs(TINY, _plan(3), HW)
    psi = c1.param_bytes[0]  # bf16 weights of the one stage
    assert psi == 2 * TINY.params() and c2.param_bytes == c3.param_bytes == (psi,)
    rs = ag = _ring(psi)
    n = math.ceil(psi / 2 / 5e7)
    assert n == 3
    fetch = n * _ring(psi / n)
    ns = 1e-9
    assert c2.f_ns[0] == c1.f_ns[0]
    assert (c2.b_ns[0] - c1.b_ns[0]) * ns == pytest.approx(rs, abs=2e-9)
    assert (c2.bw_ns[0] - c1.bw_ns[0]) * ns == pytest.approx(rs, abs=2e-9)  # the reduce-scatter follows W
    assert (c3.f_ns[0] - c1.f_ns[0]) * ns == pytest.approx(fetch, abs=3e-9)
    assert (c3.b_ns[0] - c1.b_ns[0]) * ns == pytest.approx(fetch + rs, abs=3e-9)
    assert c1.dp_bytes() == (psi,) and c2.dp_bytes() == (psi // 2,) and c3.dp_bytes() == (0,)
    # iteration (1 stage: M (F + B) + end collectives + update), differences by hand
    p1, p2, p3 = (predict_llm(TINY, _plan(z), HW) for z in (1, 2, 3))
    assert p1.dp_allreduce_s == pytest.approx(rs + ag, rel=1e-6)
    assert p2.dp_allreduce_s == pytest.approx(ag, rel=1e-6) and p3.dp_allreduce_s == 0
    assert p2.iteration_s - p1.iteration_s == pytest.approx((M - 1) * rs, rel=1e-5)
    assert p3.iteration_s - p1.iteration_s == pytest.approx(M * (2 * fetch + rs) - rs - ag, rel=1e-5)
    # without gradient accumulation, the ZeRO paper's volumes: stage 2 = stage 1, stage 3 = 1.5 x
    q = {z: predict_llm(TINY, _plan(z, global_batch=P), HW) for z in (1, 2, 3)}
    assert q[2].iteration_s == pytest.approx(q[1].iteration_s, abs=1e-8)  # ns rounding only
    assert q[3].iteration_s - q[1].iteration_s == pytest.approx(0.5 * _ring(psi, twice=2), rel=0.01, abs=1e-4)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_event_simulation_of_the_same_costs_agrees(zero):
    """The event engine runs the ZeRO-timed stage costs (dp replicas, its own all-reduce of
    ``allreduce_bytes``) and shards gradients and weights in its memory model."""
    plan = _plan(zero)
    costs, sim, _ = llm_costs(TINY, plan, HW)
    r = simulate(costs, ScheduleConfig("1f1b", stages=1, microbatches=M), sim, sim_options(plan))
    p = predict_llm(TINY, plan, HW)
    assert r.iteration_time_s == pytest.approx(p.iteration_s, rel=0.01)
    mem = r.memory_breakdown[0]
    psi = costs.param_bytes[0]
    assert mem["weights"] == (psi // P if zero >= 3 else psi)
    assert mem["gradients"] == (psi // P if zero >= 2 else psi)
    assert mem["weights"] == pytest.approx(p.memory_breakdown["weights"], abs=2)
    # the engine keeps the generic rule's bf16 gradients; Megatron-LM accumulates them in fp32
    ratio = plan_state(plan).gradients / plan.state.gradients
    assert p.memory_breakdown["gradients"] == pytest.approx(mem["gradients"] * ratio, abs=2)


@pytest.mark.parametrize("changes,needle", [
    ({"zero": 2, "pp": 2}, "zero: stage 2 shards gradients"),
    ({"zero": 3, "dp": 1, "global_batch": 2}, "zero: stage 3 shards over the data-parallel ranks; dp = 1"),
    ({"zero": 3, "schedule": "2bw", "pp": 1}, "zero: stage 3 shards the live weights"),
])
def test_inapplicable_zero_is_a_one_line_error(changes, needle):
    base = {"tp": 1, "pp": 1, "dp": 2, "global_batch": 4}
    with pytest.raises(StalesimError, match=needle) as exc:
        predict_llm(TINY, ParallelPlan(**{**base, **changes}), hardware_from_node("dgx-h100"))
    assert "\n" not in str(exc.value)
