"""The argparse types every command shares: bounds, NaN/inf, empty list items."""

from __future__ import annotations

import argparse

import pytest

from stalesim.cli.common import float_type, int_list, int_type, positive_float, positive_int, seconds


@pytest.mark.parametrize("text", ["0", "-1", "x", "", "1.5", "nan", str(2**20 + 1), "1" * 40])
def test_positive_int_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)


def test_int_and_float_types_accept_their_range() -> None:
    assert positive_int(" 7 ") == 7 and int_type(2, 5)("5") == 5
    assert positive_float("1e-3") == 1e-3 and seconds("0") == 0.0
    assert int_type(2, 5).bounds == ("int", 2, 5)  # type: ignore[attr-defined]
    assert float_type(0.0, 1.0, lo_open=True).bounds == ("float", 0.0, 1.0, True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "0", "-1", "1e300", "x"])
def test_positive_seconds_like_types_refuse(text: str) -> None:
    for t in (positive_float, seconds):
        if t is seconds and text == "0":
            continue
        with pytest.raises(argparse.ArgumentTypeError):
            t(text)


def test_int_list_refuses_empty_items() -> None:
    """Bad-input probe: `--ppv 1,,2` silently became [1, 2]."""
    assert int_list("2,5") == [2, 5] and int_list(" 7 ") == [7]
    for bad in ["1,,2", "2,", ",", "", "1,x", "1," * 3]:
        with pytest.raises(argparse.ArgumentTypeError):
            int_list(bad)
