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


@pytest.mark.parametrize("text,want", [
    ("cuda:0,1", ["cuda:0", "cuda:1"]), ("cuda:2,3", ["cuda:2", "cuda:3"]),
    ("cuda:0,1,2", ["cuda:0", "cuda:1", "cuda:2"]), ("cpu:2", ["cpu", "cpu"]),
])
def test_every_rank_gets_its_listed_device(text: str, want: list[str]) -> None:
    devs = parse_devices(text)
    assert devs.rank_devices() == want == [devs.device_for(r) for r in range(devs.count)]
    assert devs.first(1).rank_devices() == want[:1]


def test_a_rank_outside_the_list_is_an_error() -> None:
    devs = parse_devices("cuda:2,3")
    for bad in (2, -1, True):
        with pytest.raises(StalesimError, match="no rank"):
            devs.device_for(bad)  # type: ignore[arg-type]
    with pytest.raises(StalesimError, match="2 rank"):
        devs.first(3)


def test_executor_rank_gpus_are_distinct_and_never_wrap() -> None:
    """The executor's rank -> GPU mapping: the launcher's list entry by local rank, or (under
    torchrun, no list) the local rank's GPU; a rank beyond the list or the visible GPUs is an
    error, never a second rank on a GPU another rank holds."""
    from stalesim.devices import rank_gpu

    assert [rank_gpu([2, 3], r, 8) for r in range(2)] == ["cuda:2", "cuda:3"]
    assert [rank_gpu(None, r, 4) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    with pytest.raises(StalesimError, match="no rank 2"):
        rank_gpu([0, 1], 2, 8)  # the old code wrapped rank 2 onto cuda:0
    with pytest.raises(StalesimError, match="2 visible GPU"):
        rank_gpu(None, 2, 2)
