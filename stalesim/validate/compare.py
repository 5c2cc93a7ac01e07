"""Predicted vs measured, emulated vs executed: the numbers of the report (pure functions).

Conventions: ``time_error`` is signed and relative, (predicted - measured) /
measured, so +0.05 means the simulator was 5% pessimistic. Speed-ups are over
*one rank running sequential* (S = 1): predicted from the 1-rank cost model,
measured from a real 1-rank run. Loss difference: max over the steps both ran of
|emulated - executed| / max(|executed|, 1e-12).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """Signed relative error; None when either side is missing or measured is 0."""
    if predicted is None or measured is None or not _finite(predicted) or not _finite(measured):
        return None
    if measured == 0:
        return None
    return (predicted - measured) / measured


def max_loss_rel_diff(emulated: Sequence[float | None] | None,
                      executed: Sequence[float | None] | None) -> float | None:
    """Largest relative loss difference over the steps both consumers report."""
    if not emulated or not executed:
        return None
    worst = None
    for e, x in zip(emulated, executed):
        if e is None or x is None or not _finite(e) or not _finite(x):
            continue
        d = abs(e - x) / max(abs(x), 1e-12)
        worst = d if worst is None else max(worst, d)
    return worst


def mean(xs: Sequence[float] | None) -> float | None:
    xs = [x for x in (xs or []) if _finite(x)]
    return sum(xs) / len(xs) if xs else None


def make_row(schedule: str, *, predicted: dict[str, Any], measured: dict[str, Any],
             predicted_baseline_s: float | None, measured_baseline_s: float | None,
             emulated_losses: Sequence[float | None] | None = None,
             executed_losses: Sequence[float | None] | None = None,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row of ``summary.json``.

    ``predicted``: ``iteration_time_s``, ``utilization`` (per device),
    ``peak_memory_bytes`` (per device or None). ``measured``: the same keys.
    """
    p_it = predicted.get("iteration_time_s")
    m_it = measured.get("iteration_time_s")
    p_u = [float(u) for u in (predicted.get("utilization") or [])]
    m_u = [float(u) for u in (measured.get("utilization") or [])]
    p_sp = predicted_baseline_s / p_it if predicted_baseline_s and p_it else None
    m_sp = measured_baseline_s / m_it if measured_baseline_s and m_it else None
    p_mean, m_mean = mean(p_u), mean(m_u)
    row = {
        "schedule": schedule,
        "predicted_iteration_time_s": p_it,
        "measured_iteration_time_s": m_it,
        "time_error": rel_error(p_it, m_it),
        "predicted_utilization": p_u,
        "measured_utilization": m_u,
        "predicted_utilization_mean": p_mean,
        "measured_utilization_mean": m_mean,
        "utilization_error_points": (None if p_mean is None or m_mean is None
                                     else 100.0 * (p_mean - m_mean)),
        "predicted_speedup": p_sp,
        "measured_speedup": m_sp,
        "speedup_error": rel_error(p_sp, m_sp),
        "predicted_peak_memory_bytes": predicted.get("peak_memory_bytes"),
        "measured_peak_memory_bytes": measured.get("peak_memory_bytes"),
        "max_loss_rel_diff": max_loss_rel_diff(emulated_losses, executed_losses),
    }
    if extra:
        row.update(extra)
    return row


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median/max of |time error|, max utilization gap, max speed-up error, max loss diff."""
    te = [abs(r["time_error"]) for r in rows if _finite(r.get("time_error"))]
    ue = [abs(r["utilization_error_points"]) for r in rows if _finite(r.get("utilization_error_points"))]
    se = [abs(r["speedup_error"]) for r in rows if _finite(r.get("speedup_error"))]
    le = [r["max_loss_rel_diff"] for r in rows if _finite(r.get("max_loss_rel_diff"))]
    return {
        "median_abs_time_error": statistics.median(te) if te else None,
        "max_abs_time_error": max(te) if te else None,
        "max_abs_utilization_error_points": max(ue) if ue else None,
        "max_abs_speedup_error": max(se) if se else None,
        "max_loss_rel_diff": max(le) if le else None,
    }


GOALS = {"median_abs_time_error": 0.03, "max_abs_time_error": 0.08,
         "max_abs_utilization_error_points": 3.0, "max_abs_speedup_error": 0.05}


def goals_met(agg: dict[str, Any]) -> dict[str, bool | None]:
    """Each fidelity goal (docs/validate.md) -> met? (None when not measured)."""
    return {k: (None if not _finite(agg.get(k)) else agg[k] <= v) for k, v in GOALS.items()}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
