"""Measured numbers from an executor run, over the *same* window the simulator uses.

The executor's own summary skips a few warm-up batches; the simulator reports
the steady state between the completions of the batches of the schedule's
steady window (:meth:`Schedule.steady_window`: the middle half of the last
phase). To compare like with like, ``validate`` recomputes the measured
iteration time and utilization from the per-action rows over exactly that window
(a schedule without a steady state: whole run / batches, as the simulator does),
and keeps the executor's own numbers beside them.
"""

from __future__ import annotations

from typing import Any

from stalesim.schedule.actions import COMPUTE_KIND_NAMES

# the schedule IR's compute kinds (F, B, the split backward's I and W, U, LOSS), by name
COMPUTE = COMPUTE_KIND_NAMES


def completions(rows_by_rank: dict[str, list[list[Any]]], batches: int) -> list[float | None]:
    """End of the last ``U`` of each batch over all ranks (seconds since the start barrier)."""
    done: list[float | None] = [None] * batches
    for rows in rows_by_rank.values():
        for _label, kind, _s, batch, _m, _w, _t0, t1 in rows:
            if kind == "U" and 0 <= batch < batches and (done[batch] is None or t1 > done[batch]):
                done[batch] = t1
    return done


def window(sched: Any, done: list[float | None], wall: float) -> tuple[float, float, float, list[int]]:
    """(iteration time, lo, hi, [k0, k1]) as the simulator defines the schedule's steady state."""
    batches = sched.batches
    win = sched.steady_window()
    if win is None or win[1] <= win[0] or done[win[0]] is None or done[win[1]] is None:
        return wall / batches, 0.0, wall, [0, batches - 1]
    k0, k1 = win
    lo, hi = float(done[k0]), float(done[k1])
    if hi <= lo:
        return wall / batches, 0.0, wall, [0, batches - 1]
    return (hi - lo) / (k1 - k0), lo, hi, [k0, k1]


def measured_timing(summary: dict[str, Any], sched: Any) -> dict[str, Any]:
    """Iteration time and per-device utilization from an executor summary with rows, over
    the steady window of ``sched`` (the Schedule the run executed)."""
    rows = summary.get("rows") or {}
    N = int(summary["iterations"])
    done = completions(rows, N)
    wall = max((r[7] for rs in rows.values() for r in rs), default=0.0)
    it, lo, hi, win = window(sched, done, wall)
    util = []
    for d in sorted(rows, key=int):
        busy = 0.0
        for r in rows[d]:
            if r[1] in COMPUTE:
                busy += max(0.0, min(r[7], hi) - max(r[6], lo))
        util.append(min(1.0, busy / (hi - lo)) if hi > lo else 0.0)
    return {"iteration_time_s": it, "utilization": util, "window": win, "window_s": [lo, hi],
            "wall_s": wall, "batch_completion_s": done}


def rows_to_events(rows_by_rank: dict[str, list[list[Any]]]) -> list[Any]:
    """Measured rows -> :class:`stalesim.trace.TraceEvent` (the simulator's labels/tracks)."""
    from stalesim.trace import TraceEvent

    out = []
    for d in sorted(rows_by_rank, key=int):
        for label, kind, *_rest, s, e in rows_by_rank[d]:
            out.append(TraceEvent(label, s * 1e6, max(0.0, e - s) * 1e6, int(d),
                                  "compute" if kind in COMPUTE else "comm", kind))
    return out


def peak_memory(summary: dict[str, Any]) -> list[int] | None:
    pm = summary.get("peak_memory_bytes")
    if not isinstance(pm, dict) or not pm:
        return None
    return [int(pm[k]) for k in sorted(pm, key=int)]


def dispatch_gap(rows_by_rank: dict[str, list[list[Any]]], window_s: tuple[float, float] | None = None) -> float:
    """Median time between the end of one action and the start of the next on a rank.

    That is the executor loop's own cost per action (bookkeeping, posting
    receives, memory tracking), outside every recorded action span.
    """
    import itertools
    import statistics

    gaps: list[float] = []
    for rows in rows_by_rank.values():
        rs = sorted(rows, key=lambda r: r[6])
        for a, b in itertools.pairwise(rs):
            if window_s is not None and (a[7] < window_s[0] or b[6] > window_s[1]):
                continue
            g = b[6] - a[7]
            if g >= 0:
                gaps.append(g)
    return statistics.median(gaps) if gaps else 0.0


def gaps_after(rows_by_rank: dict[str, list[list[Any]]], window_s: tuple[float, float] | None = None
               ) -> dict[str, float]:
    """Median time from the end of an action of each kind to the start of the next one on
    its rank (the runtime's own work after it: the loop, the memory sample), plus
    ``"comm"``: the smallest of them (the loop alone, what follows a send or receive).

    Calibrated on the 1-rank run, whose actions are all compute: it runs no schedule
    being predicted.
    """
    import statistics

    gaps: dict[str, list[float]] = {}
    for rows in rows_by_rank.values():
        rs = sorted(rows, key=lambda r: r[6])
        for a, b in zip(rs, rs[1:]):
            if window_s is not None and (a[7] < window_s[0] or b[6] > window_s[1]):
                continue
            gaps.setdefault(a[1], []).append(max(0.0, b[6] - a[7]))
    out = {k: statistics.median(v) for k, v in gaps.items() if v}
    if out:
        out["comm"] = min(out.values())
    return out
