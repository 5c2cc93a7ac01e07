"""What an action costs when its device waited before it, read against the simulated timeline.

The stage times (:mod:`stalesim.validate.stagetime`) run a stage's actions back to back. A
rank of a pipeline often does not: it waits for a message while another rank computes,
and its next action then finds its weights and activations partly gone from the caches
the two share. Measured on 2 pinned CPU ranks (ResNet-20, batch 16, one micro-batch):
in schedules whose ranks wait before nearly every action the ranks' compute ran
1.06-1.19x the back-to-back stage times, in one whose ranks rarely wait 0.96-0.97x. A
process alone shows part of it (a 30 ms sleep on the same core: the forward +1%, the
backward +7%, ``experiments/bench_wake.py``). A real gloo receive, or the other rank
computing during the wait, adds little to that (at most +7% on a forward, nothing on a
backward: ``experiments/bench_after_recv.py``); a rank that sleeps before every action is
slower by about 4-5% over *all* its actions, which a factor on the action right after a
wait does not describe (``experiments/bench_duty_cycle.py``; docs/validate.md).

So the stage timing also times every layout's actions each after a wait of a few set
lengths (:data:`stagetime.WAITS_S`) while the co-runners compute, in the same process and
rounds as its back-to-back contended times; per kind their ratio, pooled over the stages
(:meth:`StageTimes.wait_ratios`), is a curve of the slowdown over the wait's length,
measured once per layout with no schedule. The simulator's timeline then says how long
each device was idle before each of its actions (:func:`idle_gaps`: since its previous
compute action, a message's CPU job in between not counted), and an action of kind k
after a gap g costs its back-to-back cost times the curve at g
(:func:`wait_factor`: linear between the measured points through (0, 1), flat beyond the
longest). Per stage and kind the mean factor over the steady window is charged
(:func:`wait_factors`), iterated with the contention to a fixed point
(:func:`stalesim.validate.costmodel.simulate_with_costs`), since the gaps depend on the costs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.events import Timeline
    from stalesim.sim.result import SimResult

#: per kind, ``[(wait seconds, after-wait time / back-to-back time), ...]`` sorted by wait
WaitCurves = Mapping[str, Sequence[tuple[float, float]]]


def wait_factor(curve: Sequence[tuple[float, float]], gap_s: float) -> float:
    """The slowdown of an action after an idle gap of ``gap_s``: linear between (0, 1) and the
    measured points, the last point's beyond it (a longer wait cannot evict more than all)."""
    if gap_s <= 0 or not curve:
        return 1.0
    x0, y0 = 0.0, 1.0
    for x, y in curve:
        if gap_s <= x:
            return y0 + (y - y0) * (gap_s - x0) / (x - x0) if x > x0 else y
        x0, y0 = x, y
    return y0


def busy_intervals(result: SimResult) -> list[list[tuple[int, int, int]]]:
    """Per device of the simulated timeline, the ``(start, end, gid)`` ns intervals in which it
    works: its compute actions (gid) and its transfers' CPU jobs (gid -1), unsorted."""
    from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED

    tl = _timeline(result, "busy_intervals")
    prog = tl.program
    busy: list[list[tuple[int, int, int]]] = [[] for _ in range(result.devices)]
    for gid, a in enumerate(prog.actions):
        if a.kind.value in COMPUTE_NAMES_ORDERED:
            busy[prog.device_of_gid[gid]].append((tl.start[gid], tl.end[gid], gid))
    for d, s0, e0, _ in tl.cpu_jobs:
        busy[d].append((s0, e0, -1))
    return busy


def _timeline(result: SimResult, who: str) -> Timeline:
    if result.timeline is None:
        raise ValueError(f"{who}: needs an event-simulation result")
    return result.timeline


def idle_gaps(result: SimResult, kinds: Sequence[str]) -> dict[tuple[str, int], list[float]]:
    """Per (kind, stage) of the compute actions of ``kinds`` inside the steady window: the
    seconds their device ran none of its compute actions before each (start minus the end of
    the device's previous compute action of any kind; the first action of a device has none).

    A transfer's CPU job (its share of the core on hardware without copy engines) does not
    end the wait: it touches the message's buffer, not the stage's weights and activations,
    and the receive's job lies at the very end of the wait it ends. Counted as work, a 3 us
    receive job right before a backward turned the 33 ms that a ``sequential`` rank waits
    for its gradient into a gap of 0.3 ms, and the backward was charged no after-wait cost."""
    from stalesim.sim.model import NS

    prog = _timeline(result, "idle_gaps").program
    lo, hi = result.steady_window_ns()
    out: dict[tuple[str, int], list[float]] = {}
    for ivs in busy_intervals(result):
        last_end = None
        for s0, e0, gid in sorted(iv for iv in ivs if iv[2] >= 0):
            act = prog.actions[gid]
            if act.kind.value in kinds and last_end is not None and lo <= s0 < hi:
                out.setdefault((act.kind.value, act.stage), []).append(max(0, s0 - last_end) / NS)
            last_end = e0 if last_end is None else max(last_end, e0)
    return out


def wait_factors(result: SimResult, curves: WaitCurves) -> dict[tuple[str, int], float]:
    """Per (kind, stage) with a curve: the mean :func:`wait_factor` over its actions in the
    steady window of ``result`` (1.0 where they never wait)."""
    gaps = idle_gaps(result, tuple(curves))
    return {key: statistics.fmean(wait_factor(curves[key[0]], g) for g in gs)
            for key, gs in gaps.items() if gs}
