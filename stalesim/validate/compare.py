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
from typing import Any, TypeGuard


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


def pick_median(values: Sequence[float | None]) -> float | None:
    """Median of the finite values (None when there are none)."""
    xs = [float(x) for x in values if _finite(x)]
    return statistics.median(xs) if xs else None


def noise_floor(values: Sequence[float | None]) -> float | None:
    """Run-to-run noise of repeated measurements: interquartile range / median.

    Quartiles by linear interpolation between the sorted values (``inclusive``),
    so 2 repeats give half their range; None for fewer than 2 repeats (one run says
    nothing about its own spread).
    """
    xs = sorted(float(x) for x in values if _finite(x))
    if len(xs) < 2:
        return None
    med = statistics.median(xs)
    q1, _q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return (q3 - q1) / med if med > 0 else None


def within_noise(error: float | None, noise: float | None) -> bool | None:
    """True when a relative error is no larger than the noise floor: a measurement repeated
    under the same protocol could have landed on the prediction. None when either is unknown."""
    if _finite(error) and _finite(noise):
        return abs(error) <= noise
    return None


#: bootstrap draws of :func:`noise_only_error` (its 90% ranges move by ~0.1 point between seeds)
NOISE_DRAWS = 2000


def noise_only_error(rows: Sequence[dict[str, Any]], *, draws: int = NOISE_DRAWS, seed: int = 0
                     ) -> dict[str, Any] | None:
    """The |time error| a perfect model would show at this run's noise: the median and max
    over schedules (with their 5-95% ranges over ``draws`` bootstrap draws, seeded).

    Why: both sides of an error are estimates. The measured time is the median of K repeats,
    the prediction is made from stage times pooled over K timing passes, and each moves with
    the machine (``noise_floor``, ``prediction_noise``). Per draw and schedule, K repeats are
    resampled from the row's own ``measured_iteration_times_s`` and K passes from its
    ``predicted_pass_times_s`` (each scaled to a common truth of 1), the measured side's median
    against the predicted side's mean: the error a model with no error of its own would show.
    A row without per-pass predictions counts its prediction as exact (the estimate is then
    low). None when no row has two measured repeats."""
    import random

    spreads: list[tuple[list[float], list[float]]] = []
    for r in rows:
        m = [float(x) for x in (r.get("measured_iteration_times_s") or []) if _finite(x) and x > 0]
        p = [float(x) for x in (r.get("predicted_pass_times_s") or []) if _finite(x) and x > 0]
        if len(m) < 2:
            continue
        mm, pm = statistics.median(m), statistics.fmean(p) if p else 1.0
        spreads.append(([x / mm for x in m], [x / pm for x in p] or [1.0]))
    if not spreads:
        return None
    rng = random.Random(seed)
    meds: list[float] = []
    maxs: list[float] = []
    for _ in range(draws):
        errs = []
        for m, p in spreads:
            b = statistics.median(rng.choices(m, k=len(m)))
            a = statistics.fmean(rng.choices(p, k=len(p)))
            errs.append(abs(a - b) / b)
        meds.append(statistics.median(errs))
        maxs.append(max(errs))
    meds.sort()
    maxs.sort()

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    return {"median": statistics.median(meds), "median_90": [q(meds, 0.05), q(meds, 0.95)],
            "max": statistics.median(maxs), "max_90": [q(maxs, 0.05), q(maxs, 0.95)],
            "schedules": len(spreads), "with_prediction_noise": sum(1 for _m, p in spreads if len(p) > 1),
            "draws": draws}


def memory_error(predicted: Sequence[float] | None, measured: Sequence[float] | None) -> float | None:
    """Largest signed relative error of peak memory over devices (by absolute value)."""
    if not predicted or not measured or len(predicted) != len(measured):
        return None
    errs = [rel_error(p, m) for p, m in zip(predicted, measured)]
    known = [e for e in errs if e is not None]
    return max(known, key=abs) if known else None


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
        "memory_error": memory_error(predicted.get("peak_memory_bytes"), measured.get("peak_memory_bytes")),
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
    me = [abs(r["memory_error"]) for r in rows if _finite(r.get("memory_error"))]
    re_ = [abs(r["replay_time_error"]) for r in rows if _finite(r.get("replay_time_error"))]
    nf = [r["noise_floor"] for r in rows if _finite(r.get("noise_floor"))]
    pn = [r["prediction_noise"] for r in rows if _finite(r.get("prediction_noise"))]
    wn = [r.get("time_error_within_noise") for r in rows if r.get("time_error_within_noise") is not None]
    return {
        "median_abs_time_error": statistics.median(te) if te else None,
        "max_abs_time_error": max(te) if te else None,
        "max_abs_utilization_error_points": max(ue) if ue else None,
        "max_abs_speedup_error": max(se) if se else None,
        "max_loss_rel_diff": max(le) if le else None,
        "max_abs_memory_error": max(me) if me else None,
        "median_abs_replay_error": statistics.median(re_) if re_ else None,
        "max_abs_replay_error": max(re_) if re_ else None,
        "median_noise_floor": statistics.median(nf) if nf else None,
        "max_noise_floor": max(nf) if nf else None,
        "median_prediction_noise": statistics.median(pn) if pn else None,
        "max_prediction_noise": max(pn) if pn else None,
        "schedules_within_noise": sum(1 for w in wn if w) if wn else None,
        "schedules_with_noise_floor": len(wn) if wn else None,
    }


# The simulator-vs-measurement fidelity goals (docs/validate.md, "Fidelity on this machine"),
# next to which every aggregate is printed.
GOALS = {"median_abs_time_error": 0.03, "max_abs_time_error": 0.08,
         "max_abs_utilization_error_points": 3.0, "max_abs_speedup_error": 0.05,
         "max_abs_memory_error": 0.05, "median_abs_replay_error": 0.02, "max_abs_replay_error": 0.05}


def goals_met(agg: dict[str, Any]) -> dict[str, bool | None]:
    """Each fidelity goal (docs/validate.md) -> met? (None when not measured)."""
    return {k: (None if not _finite(agg.get(k)) else agg[k] <= v) for k, v in GOALS.items()}


def _finite(x: Any) -> TypeGuard[float]:
    """A real, finite number (bools excluded); a TypeGuard, so callers' Optional values narrow."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
