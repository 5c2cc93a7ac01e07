"""Each phase at its own speed: the plan's two-phase time against the simulator's own
phased run (``simulate --warmup``), and memory as the larger phase's."""

from __future__ import annotations

import pytest

from stalesim.plan.candidates import Candidate
from stalesim.plan.timing import time_candidate
from stalesim.schedule import ScheduleConfig
from stalesim.sim import SimOptions, simulate
from stalesim.sim.model import SimHardware
from stalesim.workloads.profile import uniform_profile


@pytest.mark.parametrize("name, stages, micro", [("stale", 2, 1), ("pipedream", 3, 1), ("2bw", 2, 4)])
def test_warmup_time_matches_the_simulated_phased_run(name: str, stages: int, micro: int) -> None:
    prof = uniform_profile(6, 1e-3, 2e-3, 32, model="lenet5", device="cpu")
    hw = SimHardware.ideal("cpu")
    cand = Candidate(name, devices=stages, stages=stages, microbatches=micro, warmup=20)
    t = time_candidate(cand, prof, hw, batch_size=32)
    n = 80
    ref = simulate(prof, ScheduleConfig(name, stages=stages, batches=n, microbatches=micro, warmup=20), hw,
                   SimOptions(batch_size=32, keep_timeline=False))
    assert t.first_batches == 20 and t.first_s > t.steady_s
    assert t.time_for(n) == pytest.approx(ref.makespan_s, rel=0.03)
    plain = time_candidate(Candidate(name, devices=stages, stages=stages, microbatches=micro), prof, hw,
                           batch_size=32)
    assert plain.time_for(n) < t.time_for(n)  # the warm-up costs time
    assert t.peak_memory_bytes == plain.peak_memory_bytes or max(t.peak_memory_bytes) >= max(plain.peak_memory_bytes)


def test_hybrid_switch_time_matches_the_simulated_run() -> None:
    prof = uniform_profile(6, 1e-3, 2e-3, 32, model="lenet5", device="cpu")
    hw = SimHardware.ideal("cpu")
    t = time_candidate(Candidate("hybrid", devices=2, stages=2, switch=40), prof, hw, batch_size=32)
    ref = simulate(prof, ScheduleConfig("hybrid", stages=2, batches=100, switch=40), hw,
                   SimOptions(batch_size=32, keep_timeline=False))
    assert t.time_for(100) == pytest.approx(ref.makespan_s, rel=0.05)
