"""stalesim/validate/cores.py: ranks that outnumber the cores share them in time slices, and
the cost model charges that share by the simulated concurrency, not linearly."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stalesim.schedule import ScheduleConfig, get_spec
from stalesim.sim import simulate
from stalesim.sim.model import SimHardware, uniform_costs
from stalesim.validate.cores import busy_concurrency, busy_share, core_share, host_cores
from stalesim.validate.costmodel import CostModel, busy_overlap, simulate_with_costs, stage_costs_for
from stalesim.workloads.profile import uniform_profile

F, B = 1e-3, 2e-3


def test_core_share_is_the_time_slice_of_ranks_that_outnumber_the_cores() -> None:
    assert core_share(1, 2) == 1.0 and core_share(2, 2) == 1.0
    assert core_share(3, 2) == pytest.approx(1.5) and core_share(4, 2) == pytest.approx(2.0)
    assert core_share(2, 2, threads=2) == pytest.approx(2.0)  # two ranks of two threads on two cores
    assert core_share(5, None) == 1.0 and core_share(5, 0) == 1.0  # cores unknown: no share
    assert host_cores() >= 1


def test_busy_concurrency_splits_each_device_busy_time_by_how_many_were_busy() -> None:
    costs = uniform_costs(3, 1_000_000, 2_000_000)
    seq = simulate(costs, ScheduleConfig("sequential", stages=3, batches=8))
    assert all(set(h) == {1} for h in busy_concurrency(seq))  # one device at a time
    assert busy_share(seq, cores=2) == [1.0, 1.0, 1.0]
    pd = simulate(costs, ScheduleConfig("pipedream", stages=3, batches=30))
    hist = busy_concurrency(pd)
    assert all(h.get(3, 0) > 0.8 * sum(h.values()) for h in hist)  # the steady state: all three
    # the overlap and the share are two readings of the same histogram
    for h, ov, sh in zip(hist, busy_overlap(pd), busy_share(pd, cores=2)):
        total = sum(h.values())
        assert ov == pytest.approx(sum(t * (k - 1) / 2 for k, t in h.items()) / total)
        assert sh == pytest.approx(sum(t * max(1.0, k / 2) for k, t in h.items()) / total)
        assert 1.4 < sh <= 1.5


def test_the_contended_cost_loses_the_share_it_was_measured_in_and_gets_the_stage_s() -> None:
    """Contended 1.5x = 3 ranks on 2 cores, nothing else: at phi 1 and share 1.5 the cost is
    1.5x; at phi 0.5 with every overlap a pair (share 1) it is the alone cost, where the
    linear interpolation charged half the excess."""
    alone = uniform_profile(4, F, B, 32)
    busy = replace(alone, layers=[replace(lp, forward_s=1.5 * F, backward_s=1.5 * B) for lp in alone.layers])
    cm = CostModel(alone, busy)
    full = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[1.0, 1.0], share=[1.5, 1.5],
                           full_share=1.5)
    pairs = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[0.5, 0.5], share=[1.0, 1.0],
                            full_share=1.5)
    linear = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[0.5, 0.5])
    assert full.f_ns == (3_000_000,) * 2 and full.b_ns == (6_000_000,) * 2
    assert pairs.f_ns == (2_000_000,) * 2 and pairs.b_ns == (4_000_000,) * 2
    assert linear.f_ns == (2_500_000,) * 2


def _cm(cores: int | None, ratio: float = 1.5) -> CostModel:
    alone = uniform_profile(6, F, B, 32)
    busy = replace(alone, layers=[replace(lp, forward_s=ratio * F, backward_s=ratio * B) for lp in alone.layers])
    return CostModel(alone, busy, host_cores=cores)


@pytest.mark.parametrize("name", ["sequential", "gpipe", "1f1b", "pipedream", "zb-h1"])
def test_ranks_that_do_not_outnumber_the_cores_predict_as_before(name: str) -> None:
    """Every share is 1 with 3 ranks on 3 or more cores: bit for bit the linear model."""
    cfg = ScheduleConfig(name, stages=3, batches=12, microbatches=4 if get_spec(name).uses_micro else 1)
    hw = SimHardware.ideal()
    before, _ = simulate_with_costs(_cm(None), hw, cfg, ppv=None, batch_size=32)
    for cores in (3, 8):
        got, info = simulate_with_costs(_cm(cores), hw, cfg, ppv=None, batch_size=32)
        assert got.iteration_time_s == before.iteration_time_s and info["core_share"] is None


def test_three_ranks_on_two_cores_pay_the_share_only_while_all_three_compute() -> None:
    """Contended = pure time slicing (1.5x): a steady pipedream (all three busy) costs the
    same under both models; 1f1b, whose ranks often compute in pairs, is cheaper than the
    linear model made it; sequential is the alone cost under both."""
    hw = SimHardware.ideal()

    def t(name: str, cores: int | None) -> float:
        cfg = ScheduleConfig(name, stages=3, batches=12, microbatches=4 if get_spec(name).uses_micro else 1)
        return simulate_with_costs(_cm(cores), hw, cfg, ppv=None, batch_size=32)[0].iteration_time_s

    assert t("sequential", 2) == pytest.approx(t("sequential", None), rel=1e-9)
    assert t("sequential", 2) == pytest.approx(3 * 2 * (F + B), rel=0.02)  # 3 stages of 2 layers, alone
    assert t("pipedream", 2) == pytest.approx(t("pipedream", None), rel=0.03)
    assert t("1f1b", 2) < 0.97 * t("1f1b", None)
    # never faster than the same ranks with a core each and no contention at all
    alone = simulate_with_costs(CostModel(uniform_profile(6, F, B, 32)), hw,
                                ScheduleConfig("1f1b", stages=3, batches=12, microbatches=4),
                                ppv=None, batch_size=32)[0].iteration_time_s
    assert t("1f1b", 2) > alone
