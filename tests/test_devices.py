"""The rank list of a run (``--devices``): forms, and the bound on how many ranks start."""

from __future__ import annotations

import pytest

from stalesim.devices import parse_devices
from stalesim.errors import StalesimError


def test_forms() -> None:
    assert parse_devices("cpu:3").count == 3 and parse_devices("cuda:0,2").ids == (0, 2)


@pytest.mark.parametrize("text,needle", [
    ("cpu:99999999", "more than this tool starts"),  # would have built a 10^8-tuple and spawned
    ("cpu:" + "9" * 30, "more than this tool starts"),
    ("cuda:5000", "below 1024"),
    ("cpu:0", "N >= 1"), ("gpu:2", "expected cpu:N"), ("cuda:0,0", "distinct"),
])
def test_bad_rank_lists(text: str, needle: str) -> None:
    with pytest.raises(StalesimError, match=needle):
        parse_devices(text)
