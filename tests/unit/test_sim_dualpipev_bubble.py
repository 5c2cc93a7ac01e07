"""DualPipeV's idle time: the event engine's against the DualPipe README's bubble formula.

The README gives (PP/2 - 1)(F&B + B - 3W) for PP stages on PP/2 devices. The reference
implementation (deepseek-ai/DualPipe, dualpipev.py) runs each overlapped forward/backward
pair as one unit: it waits for both the forward's input and the backward's gradient, computes
the two, then sends both results. The event engine runs the pair's F and B as two actions, F
as soon as its input is there. With no communication cost and F&B = F + B (one compute
stream), timing the same order both ways reproduces each number: the README's for units, and
(D - 1)(F + B - 2W) for separate actions (D devices), half the README's when F = I = W. See
docs/zero-bubble-memory.md for the derivation.
"""

import pytest

from stalesim.schedule import Kind, ScheduleConfig, build_schedule
from stalesim.schedule.generators.zero_bubble import dualpipev_order
from stalesim.sim.api import SimOptions, simulate
from stalesim.sim.model import SimHardware, uniform_costs


def _engine_idle(D: int, M: int, F: int, B: int, W: int) -> int:
    """Per-device idle ns per batch of the event engine's DualPipeV (2D stages on D devices)."""
    c = uniform_costs(2 * D, F, B, bi_ns=B - W, bw_ns=W)
    sched = build_schedule(ScheduleConfig("dualpipev", stages=2 * D, microbatches=M, stages_per_device=2))
    r = simulate(c, sched, SimHardware("test", "free"), SimOptions(keep_timeline=False))
    return round(r.iteration_time_s * 1e9) - M * 2 * (F + B)


def _pair_unit_idle(D: int, M: int, F: int, B: int, W: int) -> int:
    """Per-device idle of the same order timed as the reference implementation runs it: a
    forward followed by a full backward is one pair (except the last device's first, which the
    reference does not overlap), started when both its inputs are there, both results at its
    end. Device r holds stage r (chunk 0) and stage 2D-1-r (chunk 1); no communication cost."""
    S = 2 * D
    dur = {Kind.F: F, Kind.B: B, Kind.I: B - W, Kind.W: W}
    orders = [dualpipev_order(M, D, r) for r in range(D)]
    stage = [(r, S - 1 - r) for r in range(D)]

    def need(kind: Kind, s: int, m: int) -> tuple[str, int, int] | None:
        if kind is Kind.F:
            return ("F", s - 1, m) if s > 0 else None
        if kind in (Kind.B, Kind.I):
            return ("G", s + 1, m) if s < S - 1 else ("F", s, m)
        return None

    done: dict[tuple[str, int, int], int] = {}
    pos, free, first_pair = [0] * D, [0] * D, [True] * D
    while any(pos[r] < len(orders[r]) for r in range(D)):
        moved = False
        for r in range(D):
            while pos[r] < len(orders[r]):
                kind, c, m = orders[r][pos[r]]
                unit = [(kind, stage[r][c], m)]
                nxt = orders[r][pos[r] + 1] if pos[r] + 1 < len(orders[r]) else None
                if kind is Kind.F and nxt is not None and nxt[0] is Kind.B:
                    if not (r == D - 1 and first_pair[r]):
                        unit.append((nxt[0], stage[r][nxt[1]], nxt[2]))
                    first_pair[r] = False
                deps = [need(k, s, mm) for k, s, mm in unit]
                if any(d is not None and d not in done for d in deps):
                    break
                start = max([free[r]] + [done[d] for d in deps if d is not None])
                free[r] = end = start + sum(dur[k] for k, _, _ in unit)
                for k, s, mm in unit:
                    if k is not Kind.W:
                        done[("F" if k is Kind.F else "G", s, mm)] = end
                pos[r] += len(unit)
                moved = True
        assert moved, "the order deadlocked"
    return max(free) - M * 2 * (F + B)


@pytest.mark.parametrize("D", [2, 4, 8])
def test_engine_idle_is_the_zero_bubble_formula_over_the_devices(D):
    """F = I = W = 10 (B = 20): the engine's idle is (D - 1)(F + B - 2W) per device."""
    assert _engine_idle(D, 4 * D, 10, 20, 10) == (D - 1) * (10 + 20 - 2 * 10)


@pytest.mark.parametrize("D", [2, 4, 8])
def test_pairs_as_units_give_the_readme_bubble(D):
    """Timed as the reference runs it, the same order idles (PP/2 - 1)(F&B + B - 3W) with
    PP = 2D and F&B = F + B: twice the engine's idle when F = I = W."""
    F, B, W = 10, 20, 10
    readme = (D - 1) * ((F + B) + B - 3 * W)
    assert _pair_unit_idle(D, 4 * D, F, B, W) == readme
    assert readme == 2 * _engine_idle(D, 4 * D, F, B, W)


def test_pair_unit_timing_never_exceeds_the_readme_bound():
    """Away from F = I = W the README's formula bounds the unit timing from above."""
    for F, B, W in [(10, 20, 8), (10, 20, 5), (10, 30, 10), (10, 30, 15)]:
        for D in (2, 4, 8):
            got = _pair_unit_idle(D, 4 * D, F, B, W)
            assert _engine_idle(D, 4 * D, F, B, W) <= got <= (D - 1) * (F + 2 * B - 3 * W)
