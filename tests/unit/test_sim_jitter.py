"""Drawn action times (stalesim.sim.jitter): which actions are drawn, that the engine uses the
draws exactly, and that a pipeline's waits make the mean of jittered runs slower than the run
with mean times, while a device that never waits keeps its expected time."""

import statistics

import pytest

from stalesim.errors import StalesimError
from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim import SimOptions, simulate
from stalesim.sim.events import COMPUTE, compile_schedule, simulate_program
from stalesim.sim.jitter import ActionJitter
from stalesim.sim.model import SimHardware, StageCosts

COSTS = StageCosts((3000, 5000), (6000, 9000), (200, 200), 100, (0,) * 2, (0,) * 2, (0,) * 2, 0, 4, 1)
SPREAD = ActionJitter({"F": (0.5, 1.5), "B": (0.7, 1.3)})


def _prog(name="gpipe", **kw):
    return compile_schedule(build_schedule(ScheduleConfig(name, stages=2, microbatches=4, batches=12, **kw)))


def test_factors_draw_compute_kinds_only_and_depend_on_the_seed_alone():
    prog = _prog()
    f0, f0b, f1 = SPREAD.factors(prog), SPREAD.factors(prog), SPREAD.with_seed(1).factors(prog)
    assert f0 == f0b and f0 != f1
    for ops in prog.ops:
        for op, gid, _kc, _s, _r in ops:
            kind = prog.actions[gid].kind.value
            if op != COMPUTE or kind not in ("F", "B"):
                assert f0[gid] == 1.0  # sends, receives, U and LOSS keep their mean
            else:
                assert f0[gid] in SPREAD.ratios[kind]


def test_engine_uses_each_draw_exactly():
    prog = _prog()
    hw = SimHardware.ideal()
    tl = simulate_program(prog, COSTS, hw, jitter=SPREAD)
    f = SPREAD.factors(prog)
    table = {"F": COSTS.f_ns, "B": COSTS.b_ns}
    for gid, a in enumerate(prog.actions):
        if a.kind.value in table:
            assert tl.end[gid] - tl.start[gid] == round(table[a.kind.value][a.stage] * f[gid])


def test_a_spread_of_exactly_one_is_the_mean_timeline():
    prog = _prog("1f1b")
    hw = SimHardware(device="x", link="l", latency_ns=300, bandwidth_Bps=1e9)
    a = simulate_program(prog, COSTS, hw)
    b = simulate_program(prog, COSTS, hw, jitter=ActionJitter({"F": (1.0,), "B": (1.0,)}))
    assert a.start == b.start and a.end == b.end and a.makespan == b.makespan


def test_waits_make_jittered_pipelines_slower_and_a_lone_device_keeps_its_mean():
    hw = SimHardware.ideal()
    even = StageCosts((4000, 4000), (8000, 8000), (200, 200), 100, (0,) * 2, (0,) * 2, (0,) * 2, 0, 4, 1)
    cfg = ScheduleConfig("1f1b", stages=2, microbatches=4, batches=12)
    base = simulate(even, cfg, hw)
    drawn = [simulate(even, cfg, hw, SimOptions(jitter=SPREAD.with_seed(k))).iteration_time_s for k in range(16)]
    # each stage's busy time is the same in expectation; the waits for the later device are not
    assert statistics.fmean(drawn) > 1.03 * base.iteration_time_s
    # one device never waits: its time is the sum of its draws, whose mean is the mean time
    prog = compile_schedule(build_schedule(ScheduleConfig("sequential", stages=2, batches=12, fold=1)))
    for k in range(3):
        j = SPREAD.with_seed(k)
        tl = simulate_program(prog, COSTS, hw, jitter=j)
        f = j.factors(prog)
        table = {"F": COSTS.f_ns, "B": COSTS.b_ns, "U": COSTS.u_ns}
        want = sum(round(table[a.kind.value][a.stage] * f[g]) if a.kind.value in table else COSTS.loss_ns
                   for g, a in enumerate(prog.actions) if a.kind.value in (*table, "LOSS"))
        assert tl.makespan == want


@pytest.mark.parametrize("bad, field", [({"SEND_F": (1.0,)}, "not a compute kind"),
                                        ({"F": ()}, "no samples"),
                                        ({"F": (1.0, -0.2)}, "must be in"),
                                        ({"B": (float("nan"),)}, "must be in")])
def test_bad_spreads_are_refused_naming_the_field(bad, field):
    with pytest.raises(StalesimError, match=f"jitter: .*{field}"):
        SimOptions(jitter=ActionJitter(bad)).check()


def test_jitter_needs_the_event_simulation():
    with pytest.raises(StalesimError, match="jitter: .*event simulation"):
        simulate(COSTS, ScheduleConfig("gpipe", stages=2, microbatches=4, batches=12), SimHardware.ideal(),
                 SimOptions(method="fast", jitter=SPREAD))


def test_spread_is_the_coefficient_of_variation():
    cv = ActionJitter({"F": (0.5, 1.5), "B": (1.0, 1.0)}).spread()
    assert cv["F"] == pytest.approx(0.5) and cv["B"] == 0.0


def test_a_measured_ratio_is_kept_within_the_bounds_a_spread_accepts():
    from stalesim.sim.jitter import MAX_RATIO, MIN_RATIO, measured_ratio

    assert measured_ratio(1.3) == 1.3
    assert measured_ratio(24.0) == MAX_RATIO and measured_ratio(-0.2) == MIN_RATIO
    ActionJitter({"LOSS": (measured_ratio(24.0), measured_ratio(0.0), 1.0)}).check()
