"""Paired differences and the Student-t quantile (no SciPy): against published table values."""

from __future__ import annotations

import pytest

from lab.reproduce.stats import paired_difference, t_cdf, t_quantile
from stalesim.errors import StalesimError


@pytest.mark.parametrize(("df", "q975"), [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)])
def test_t_quantile_matches_tables(df, q975):
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-3)


def test_t_cdf_symmetric_and_normal_limit():
    assert t_cdf(0.0, 3) == 0.5
    assert t_cdf(1.5, 3) + t_cdf(-1.5, 3) == pytest.approx(1.0, abs=1e-12)
    assert t_cdf(1.959964, 10_000) == pytest.approx(0.975, abs=1e-4)  # -> the normal


def test_paired_difference_interval():
    a = [98.1, 97.9, 98.3, 98.0, 98.2]
    b = [97.6, 97.7, 97.9, 97.5, 97.8]
    p = paired_difference(a, b)
    d = [0.5, 0.2, 0.4, 0.5, 0.4]
    assert p.diffs == pytest.approx(tuple(d))
    assert p.mean == pytest.approx(0.4)
    half = 2.776445 * p.std / 5 ** 0.5
    assert (p.ci_low, p.ci_high) == pytest.approx((0.4 - half, 0.4 + half), abs=1e-5)
    assert p.significant
    # the same numbers unpaired-looking: a swap that cancels makes the interval include 0
    assert not paired_difference([1.0, 2.0, 3.0], [2.0, 1.0, 3.0]).significant


def test_paired_difference_bad_input():
    with pytest.raises(StalesimError, match="same length"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(StalesimError, match="same length"):
        paired_difference([1.0], [1.0])
