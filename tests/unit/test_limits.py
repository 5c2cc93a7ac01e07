"""The bounds every numeric input is checked against (stalesim.limits)."""

from __future__ import annotations

import math

import pytest

from stalesim.errors import StalesimError
from stalesim.limits import MAX_COUNT, MAX_SECONDS, check_int, check_number


def test_check_int_ranges_and_types() -> None:
    assert check_int("stages", 4, lo=1) == 4
    assert check_int("stages", MAX_COUNT, lo=1) == MAX_COUNT
    for bad, msg in [(0, "stages: expected an integer >= 1, got 0"), (True, "got True"), (2.0, "got 2.0"),
                     ("3", "got '3'"), (None, "got None"),
                     (MAX_COUNT + 1, "larger than this tool handles (at most 1,048,576)")]:
        with pytest.raises(StalesimError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            check_int("stages", bad, lo=1)


def test_check_number_refuses_nan_inf_and_huge() -> None:
    assert check_number("lr", 0.5, lo_open=True) == 0.5
    assert check_number("t", 3, hi=MAX_SECONDS) == 3.0
    for bad, msg in [(math.nan, "finite"), (math.inf, "finite"), (-math.inf, "finite"), (0.0, "> 0"),
                     (-1, ">= 0"), (10**400, "larger than"), (1e300, "larger than"), ("1", "a number"),
                     (False, "a number")]:
        with pytest.raises(StalesimError, match=msg):
            check_number("lr" if bad == 0.0 else "t", bad, hi=MAX_SECONDS, lo_open=bad == 0.0)
