"""Time to target = iterations to target x predicted iteration time, with its interval,
feasibility, ranking and speed-ups. Pure arithmetic on the other modules' results, so it
is tested on constructed inputs with known answers.

**Interval.** Two independent sources: the seeds (iterations to target, an interval of
the mean over seeds, :mod:`~stalesim.plan.convergence`) and the prediction of the
iteration time (a relative error ``time_error``: what the simulator missed by on
measured runs, docs/validate.md). The time is monotone in the iterations, so::

    lo = time(n_lo) x (1 - time_error),  mean = time(n_mean),  hi = time(n_hi) x (1 + time_error).

**Feasibility.** A candidate is infeasible when a device's predicted peak memory exceeds
the device's capacity; the reason names the device, its need and the capacity. Without a
known capacity (a profile's own device) every candidate is feasible, said in the reason.

**Ranking.** Feasible candidates that reach the target, fastest mean first; then the
feasible ones that do not reach it; then the infeasible ones. **Speed-ups** of a ranked
candidate: the best synchronous multi-device candidate's time over its own, and the one-
device ``sequential`` time (same optimizer) over its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stalesim.plan.candidates import Candidate
from stalesim.plan.convergence import Convergence, Interval
from stalesim.plan.timing import Timing


@dataclass
class Row:
    """One candidate's answer."""

    candidate: Candidate
    convergence: Convergence
    timing: Timing | None
    time_s: Interval | None = None  # time to target
    feasible: bool = True
    reason: str = ""
    rank: int | None = None
    speedup_vs_sync: float | None = None
    speedup_vs_one_device: float | None = None
    error: str = ""  # the simulation refused the candidate (named)

    @property
    def ranked(self) -> bool:
        return self.feasible and self.convergence.reached and self.time_s is not None

    def to_dict(self) -> dict[str, Any]:
        c, t, iv = self.candidate, self.timing, self.convergence.interval
        return {
            "rank": self.rank, **c.to_dict(), "synchronous": c.synchronous,
            "status": self.convergence.status,
            "iterations_mean": None if iv is None else iv.mean,
            "iterations_lo": None if iv is None else iv.lo,
            "iterations_hi": None if iv is None else iv.hi,
            "seeds": len(self.convergence.per_seed),
            "iterations_per_seed": self.convergence.per_seed,
            "iteration_s": None if t is None else t.steady_s,
            "first_phase_iteration_s": None if t is None or not t.first_batches else t.first_s,
            "fill_drain_s": None if t is None else t.overhead_s,
            "time_to_target_s": None if self.time_s is None else self.time_s.mean,
            "time_lo_s": None if self.time_s is None else self.time_s.lo,
            "time_hi_s": None if self.time_s is None else self.time_s.hi,
            "peak_memory_bytes": None if t is None else t.peak_bytes,
            "feasible": self.feasible, "reason": self.reason,
            "speedup_vs_sync": self.speedup_vs_sync, "speedup_vs_one_device": self.speedup_vs_one_device,
            "cost_source": None if t is None else t.cost_source,
            "sim_warnings": [] if t is None else list(t.warnings),
            "note": "; ".join(x for x in (self.convergence.note, self.error) if x),
        }


def time_interval(iterations: Interval, timing: Timing, time_error: float) -> Interval:
    """Time to target from iterations to target (see the module doc)."""
    return Interval(timing.time_for(iterations.mean), timing.time_for(iterations.lo) * (1.0 - time_error),
                    timing.time_for(iterations.hi) * (1.0 + time_error), iterations.n)


def feasibility(timing: Timing | None, capacity_bytes: float | None) -> tuple[bool, str]:
    """(feasible, reason) of a candidate's peak memory per device against the capacity."""
    if timing is None:
        return False, "not simulated"
    if capacity_bytes is None:
        return True, "device memory unknown (give --device-memory or a catalog --target)"
    over = [(d, p) for d, p in enumerate(timing.peak_memory_bytes) if p > capacity_bytes]
    if not over:
        return True, ""
    d, p = max(over, key=lambda x: x[1])
    return False, (f"out of memory: device {d} needs {p / 2**30:.3g} GiB, the device has "
                   f"{capacity_bytes / 2**30:.3g} GiB ({len(over)} device(s) over)")


def compose(cands: Sequence[Candidate], convs: dict[Candidate, Convergence],
            timings: dict[Candidate, Timing | None], *, time_error: float, capacity_bytes: float | None,
            errors: dict[Candidate, str] | None = None) -> list[Row]:
    """Rows in rank order (see the module doc)."""
    rows = []
    for c in cands:
        t = timings.get(c)
        row = Row(c, convs[c], t, error=(errors or {}).get(c, ""))
        row.feasible, row.reason = feasibility(t, capacity_bytes)
        if row.error:
            row.feasible, row.reason = False, row.error
        if t is not None and convs[c].interval is not None:
            row.time_s = time_interval(convs[c].interval, t, time_error)  # type: ignore[arg-type]
        rows.append(row)

    def order(r: Row) -> tuple[int, float]:
        group = 0 if r.ranked else (1 if r.feasible else 2)
        return group, (r.time_s.mean if r.time_s is not None else math.inf)

    rows.sort(key=order)
    for i, r in enumerate(x for x in rows if x.ranked):
        r.rank = i + 1
    ranked = [r for r in rows if r.ranked]
    sync = [r for r in ranked if r.candidate.synchronous and r.candidate.devices > 1] or \
        [r for r in ranked if r.candidate.synchronous]
    best_sync = min((r.time_s.mean for r in sync if r.time_s is not None), default=None)
    one_device = {r.candidate.optimizer: r.time_s.mean for r in ranked
                  if r.candidate.devices == 1 and r.time_s is not None}
    for r in ranked:
        assert r.time_s is not None
        if best_sync is not None and r.time_s.mean > 0:
            r.speedup_vs_sync = best_sync / r.time_s.mean
        base = one_device.get(r.candidate.optimizer)
        if base is not None and r.time_s.mean > 0:
            r.speedup_vs_one_device = base / r.time_s.mean
    return rows


def pareto(rows: Sequence[Row]) -> list[Row]:
    """The ranked rows no other ranked row beats in both time to target and peak memory."""
    pts = [r for r in rows if r.ranked and r.timing is not None and r.time_s is not None]
    front = []
    for r in pts:
        assert r.time_s is not None and r.timing is not None
        dominated = any(o is not r and o.time_s is not None and o.timing is not None
                        and o.time_s.mean <= r.time_s.mean and o.timing.peak_bytes <= r.timing.peak_bytes
                        and (o.time_s.mean < r.time_s.mean or o.timing.peak_bytes < r.timing.peak_bytes)
                        for o in pts)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: r.timing.peak_bytes if r.timing else 0)
