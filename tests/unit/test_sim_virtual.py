"""Simulating virtual-stage and split-backward schedules: the papers' closed forms under
their assumptions, the flush fast path against the event path, I/W costs and memory.

Units: a micro-batch's forward on one chunk F = 1, input gradient I = 1, weight gradient
W = 1, a full backward B = I + W = 2 (the zero-bubble paper's T_F = T_B = T_W), ideal link.
"""

from __future__ import annotations

import pytest

from stalesim.schedule import ScheduleConfig
from stalesim.sim import SimOptions, simulate
from stalesim.sim.model import SimHardware, StageCosts, uniform_costs
from stalesim.workloads.profile import WEIGHT_GRAD_FRACTION, uniform_profile

U = 1000  # ns


def it(name, S, M, *, V=None, method="event", costs=None, hw=None, batches=10):
    c = costs or uniform_costs(S, U, 2 * U, bi_ns=U, bw_ns=U, batch_size=M)
    r = simulate(c, ScheduleConfig(name, stages=S, microbatches=M, stages_per_device=V, batches=batches),
                 hw or SimHardware.ideal(), SimOptions(method=method))
    return r


@pytest.mark.parametrize("R, V, M", [(4, 2, 8), (4, 4, 8), (2, 2, 4), (4, 2, 16), (8, 2, 16)])
def test_interleaved_bubble_is_1f1b_bubble_over_v(R, V, M):
    """Megatron: bubble time (R-1)(F+B)/V per device, i.e. (R-1)/(V M) of the work, 1/V of
    1F1B's on the same devices (1F1B over R stages of V chunks each)."""
    work = V * M * 3 * U  # per device: V chunks x M micro-batches x (F + B)
    t = it("interleaved-1f1b", R * V, M, V=V).iteration_time_s * 1e9
    assert t - work == pytest.approx((R - 1) * 3 * U, rel=1e-9)
    assert (t - work) / work == pytest.approx((R - 1) / (V * M), rel=1e-9)
    # 1F1B with one stage of V chunks' cost per device
    c = uniform_costs(R, V * U, 2 * V * U, batch_size=M)
    t1 = it("1f1b", R, M, costs=c).iteration_time_s * 1e9
    assert (t1 - work) == pytest.approx(V * (t - work), rel=1e-9)


@pytest.mark.parametrize("S, M", [(4, 8), (4, 16), (8, 16), (3, 6)])
def test_zb_h1_bubble_is_a_third_of_1f1b(S, M):
    """ZB-H1: (S-1)(F + I - W) = S-1 against 1F1B's (S-1)(F + B) = 3(S-1)."""
    t = it("zb-h1", S, M).iteration_time_s * 1e9
    t1 = it("1f1b", S, M).iteration_time_s * 1e9
    assert t - 3 * M * U == pytest.approx((S - 1) * U)
    assert t1 - 3 * M * U == pytest.approx(3 * (S - 1) * U)
    assert (t - 3 * M * U) / (t1 - 3 * M * U) == pytest.approx(1 / 3)


@pytest.mark.parametrize("name, S, M", [("zb-h2", 4, 8), ("zb-h2", 6, 12), ("zb-h2", 8, 24),
                                        ("zb-v", 8, 8), ("zb-v", 8, 16), ("zb-v", 6, 9)])
def test_zero_bubble_schedules_have_no_bubble(name, S, M):
    """ZB-H2 (with M >= 2S - 1... here M >= 2S) and ZB-V (M >= 2R - 1): every device busy."""
    r = it(name, S, M)
    V = 2 if name == "zb-v" else 1
    assert r.iteration_time_s * 1e9 == pytest.approx(V * M * 3 * U)
    assert r.bubble_fraction == pytest.approx(0.0, abs=1e-12)


def test_dualpipev_bubble_and_zb_v_order():
    """DualPipeV with uniform F = I = W: a small bubble, (R-1) units on an R-device V, at
    most ZB-V's... here exactly R - 1 = 3 units over 48 (the overlapped pairs run back to
    back on one compute stream)."""
    r = it("dualpipev", 8, 8)
    assert r.iteration_time_s * 1e9 == pytest.approx(51 * U)


NAMES = ["interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "dualpipev"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("link", ["ideal", "slow"])
def test_flush_fast_path_equals_the_event_path(name, link):
    """Non-uniform stages, split halves that do not add up to B, a real link."""
    S, M = 8, 8
    f = tuple(U * (1 + s % 3) for s in range(S))
    b = tuple(2 * x for x in f)
    costs = StageCosts(f, b, (300,) * S, 50, (4000,) * S, (8000,) * S, (1000,) * S, 10**6, M, 1,
                       bi_ns=tuple(x // 2 + 100 for x in b), bw_ns=tuple(x // 2 + 200 for x in b))
    hw = SimHardware.ideal() if link == "ideal" else SimHardware("d", "l", latency_ns=700,
                                                                 bandwidth_Bps=4e9)
    ev = it(name, S, M, costs=costs, hw=hw)
    fa = it(name, S, M, costs=costs, hw=hw, method="fast")
    assert fa.iteration_time_s == pytest.approx(ev.iteration_time_s, rel=0.02)
    assert ev.fast_formula.startswith("one flushed batch")


def test_split_costs_from_the_profile_and_the_default_fraction():
    S, M = 4, 4
    prof = uniform_profile(8, 1e-3, 2e-3, 16)
    r = simulate(prof, ScheduleConfig("zb-h1", stages=S, microbatches=M, batches=4))
    bi, bw = r.stage_costs["backward_input_s"], r.stage_costs["backward_weight_s"]
    b = r.stage_costs["backward_s"]
    assert bw == pytest.approx([x * WEIGHT_GRAD_FRACTION for x in b])
    assert [i + w for i, w in zip(bi, bw)] == pytest.approx(b)
    d = prof.to_dict()
    for lp in d["layers"]:
        lp["backward_input_s"], lp["backward_weight_s"] = 0.4e-3, 1.9e-3
    from stalesim.workloads.profile import profile_from_dict

    r2 = simulate(profile_from_dict(d), ScheduleConfig("zb-h1", stages=S, microbatches=M, batches=4))
    # 2 layers per stage, at the micro-batch (16 / 4 = a quarter of the batch)
    assert r2.stage_costs["backward_input_s"] == pytest.approx([2 * 0.4e-3 / 4] * S)
    assert r2.stage_costs["backward_weight_s"] == pytest.approx([2 * 1.9e-3 / 4] * S)
    # a cheap I shortens the backward chain: ZB-H1 gains from the split, the event path and
    # the flush replay agree on it
    fast = simulate(profile_from_dict(d), ScheduleConfig("zb-h1", stages=S, microbatches=M, batches=4),
                    options=SimOptions(method="fast"))
    assert fast.iteration_time_s == pytest.approx(r2.iteration_time_s)
    assert r2.iteration_time_s != r.iteration_time_s


def test_memory_counts_deferred_weight_gradients_and_chunks():
    prof = uniform_profile(8, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=10_000)
    zb = simulate(prof, ScheduleConfig("zb-h1", stages=4, microbatches=8, batches=4))
    one = simulate(prof, ScheduleConfig("1f1b", stages=4, microbatches=8, batches=4))
    # ZB-H1 holds S micro-batches of activations on every stage (1F1B: S - s) and the
    # deferred W's intermediate gradients; a micro-batch is 2 of 16 samples, a stage 2 blocks
    per_micro = 2 * 10_000 * 2 // 16
    acts = [b["activations"] for b in zb.memory_breakdown]
    assert acts == [4 * per_micro] * 4
    assert [b["activations"] for b in one.memory_breakdown] == [k * per_micro for k in (4, 3, 2, 1)]
    assert [b["deferred_w"] for b in zb.memory_breakdown] == [k * 2 * round(100 * 2 / 16) for k in (1, 2, 3, 4)]
    assert all(b["deferred_w"] == 0 for b in one.memory_breakdown)
    # two chunks per device: weights of both chunks on one device
    v = simulate(prof, ScheduleConfig("zb-v", stages=4, microbatches=4, batches=4))
    assert v.devices == 2 and [b["weights"] for b in v.memory_breakdown] == [2 * 2 * 1000] * 2
