"""Paired differences over seeds with a Student-t 95 % confidence interval.

A seed fixes the initialization and the data order, so the sequential and the stale run of one
seed are a pair; the paired difference removes the seed-to-seed spread that both share. No
SciPy in the dependencies: the t quantile is found by bisection on the CDF, which is integrated
numerically (Simpson) from the density; accurate to ~1e-9 for the degrees of freedom used here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from stalesim.errors import StalesimError


def t_pdf(x: float, df: int) -> float:
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(c - (df + 1) / 2 * math.log1p(x * x / df))


def t_cdf(x: float, df: int, steps: int = 4000) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (Simpson's rule on [0, |x|])."""
    if x == 0:
        return 0.5
    a = abs(x)
    h = a / steps
    s = t_pdf(0.0, df) + t_pdf(a, df)
    s += sum((4 if k % 2 else 2) * t_pdf(k * h, df) for k in range(1, steps))
    half = s * h / 3
    return 0.5 + half if x > 0 else 0.5 - half


def t_quantile(p: float, df: int) -> float:
    """The x with P(T <= x) = p (0.5 < p < 1), by bisection."""
    if not 0.5 < p < 1 or df < 1:
        raise StalesimError(f"t_quantile: need 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Paired:
    """Mean paired difference ``a - b`` over n pairs, its sample std and the 95 % t interval."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    diffs: tuple[float, ...]

    @property
    def significant(self) -> bool:
        """The 95 % interval excludes zero."""
        return self.ci_low > 0 or self.ci_high < 0


def paired_difference(a: list[float], b: list[float], level: float = 0.95) -> Paired:
    """Paired difference of two equal-length lists (same seeds, same order)."""
    if len(a) != len(b) or len(a) < 2:
        raise StalesimError(f"paired_difference: need two lists of the same length >= 2, got {len(a)}, {len(b)}")
    d = [x - y for x, y in zip(a, b, strict=True)]
    m, sd = statistics.fmean(d), statistics.stdev(d)
    half = t_quantile(0.5 + level / 2, len(d) - 1) * sd / math.sqrt(len(d))
    return Paired(len(d), m, sd, m - half, m + half, tuple(d))
