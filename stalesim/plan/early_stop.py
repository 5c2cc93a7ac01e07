"""Early stop: a candidate that cannot win gets no longer horizon.

**The rule.** After a horizon h, a candidate c not yet at the target stops when even its
best possible time to target lies above the interval of a candidate that reached it::

    time_c(n_min) (1 - e) > min over reached r of time_r(n_hi,r) (1 + e)

n_min is the least mean over seeds c can still have: each seed's crossing where it crossed,
h + 1 where it has not (it needs at least one more iteration); time_c is c's predicted time
for n iterations (fill and drain, warm-up and steady phases: :meth:`Timing.time_for`,
increasing in n); e is the iteration-time error (``--time-error``); the right side is the
upper end of a reached candidate's time interval (:func:`stalesim.plan.compose.time_interval`),
over the feasible reached candidates that were simulated. The left side is a lower bound
of every end of c's interval, so c, whatever its crossings, ranks behind r with
intervals that do not even overlap: it cannot be the plan's answer. It is listed as
``cannot win`` with both numbers, and its iterations stay unknown.

With ``--batched`` the crossings of the reached candidates are the batched runs', which
the single runs confirm later (:mod:`stalesim.plan.confirm`) within
:func:`~stalesim.plan.confirm.confirm_margin` of them; the rule then takes each seed's
crossing plus that margin for r's n_hi, and the plan checks the rule again on the
confirmed crossings (a candidate it no longer excludes says so in its note).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

from stalesim.plan.confirm import confirm_margin
from stalesim.plan.convergence import CANNOT_WIN, Convergence, seed_interval
from stalesim.plan.timing import Timing

C = TypeVar("C")

__all__ = ["CANNOT_WIN", "best_upper_s", "cannot_win", "least_iterations"]


def least_iterations(conv: Convergence) -> float:
    """n_min: the least mean over seeds ``conv``'s candidate can still reach the target at."""
    if not conv.per_seed:
        return math.inf
    return sum(float(n) if n is not None else conv.horizon + 1.0 for n in conv.per_seed) / len(conv.per_seed)


def best_upper_s(convs: Mapping[C, Convergence], timings: Mapping[C, Timing | None], feasible: Sequence[C],
                 time_error: float, *, smooth: int = 0, batched: bool = False) -> float:
    """The least upper end of a reached, feasible, simulated candidate's time interval
    (inf: none yet). ``batched``: each crossing is widened by the confirmation's margin."""
    best = math.inf
    for c in feasible:
        conv, t = convs.get(c), timings.get(c)
        if conv is None or t is None or not conv.reached:
            continue
        seeds = [float(n) for n in conv.per_seed if n is not None]
        if batched:
            seeds = [n + confirm_margin(int(n), smooth) for n in seeds]
        best = min(best, t.time_for(seed_interval(seeds).hi) * (1.0 + time_error))
    return best


def cannot_win(conv: Convergence, timing: Timing | None, best_upper: float, time_error: float) -> str:
    """Why the rule stops ``conv``'s candidate ('' : it may still win; see the module doc)."""
    if timing is None or conv.reached or not math.isfinite(best_upper):
        return ""
    n = least_iterations(conv)
    low = timing.time_for(n) * (1.0 - time_error)
    if not low > best_upper:
        return ""
    return (f"stopped at {conv.horizon} iterations: even at {n:.0f} iterations it would take at least "
            f"{low:.4g} s, more than the {best_upper:.4g} s a reached candidate takes at most")
