"""WeightTokens: a saved weight becomes a token that unpacks to the version a backward reads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stalesim.runtime.weight_tokens import WeightTokens, ptr_map, storage_ptr


def test_a_saved_weight_view_is_a_token_with_its_offset_and_unpacks_to_the_read_weights():
    w = nn.Parameter(torch.arange(12.0).reshape(3, 4))
    tok = WeightTokens([w])
    seen: dict[int, int] = {}
    with tok.packing(None, seen):
        packed = tok.pack(w.detach()[1:, 2:])
        other = torch.ones(5)
        assert tok.pack(other) is other  # not a weight: saved as it is, and counted
    assert packed == ("stalesim-param", 0, (2, 2), (4, 1), 6)
    assert seen == {storage_ptr(other): 20}
    old = torch.full((3, 4), -1.0)
    with tok.reading([old]):
        assert torch.equal(tok.unpack(packed), torch.full((2, 2), -1.0))
    with pytest.raises(RuntimeError, match="outside a stage backward"):
        tok.unpack(packed)


def test_predicted_leaves_are_tokens_for_their_own_storages_only_while_packing():
    w = nn.Parameter(torch.zeros(4))
    pred = torch.ones(4)
    tok = WeightTokens([w])
    with tok.packing([pred], {}):
        assert tok.pack(pred)[:2] == ("stalesim-param", 0)
        assert not isinstance(tok.pack(w.detach()), tuple)  # the live weight is not read here
    assert isinstance(tok.pack(w.detach()), tuple)  # back to the live parameters


def test_ptr_map_skips_tensors_without_storage_bytes():
    a, b = torch.zeros(2), torch.zeros(0)
    assert ptr_map([a, b]) == {storage_ptr(a): 0}
    assert storage_ptr(b) is None
