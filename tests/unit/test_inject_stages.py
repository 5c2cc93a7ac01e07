"""Cutting a user's model into stages: named prefixes, submodules, the even split, and
every mistake as one line naming what is wrong."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.inject import even_split, named_split


class Tied(nn.Module):
    """An embedding whose weight the output layer reuses (GPT-2's weight tying)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.wte.weight


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def test_prefixes_and_submodules_name_the_same_stages():
    net = _net()
    a = named_split(net, [["0"], ["2", "4"]])
    b = named_split(net, [net[0], [net[2], net[4]]])
    assert a.names == b.names == [["0.weight", "0.bias"], ["2.weight", "2.bias", "4.weight", "4.bias"]]
    assert [[id(p) for p in ps] for ps in a.params] == [[id(p) for p in ps] for ps in b.params]


def test_a_prefix_is_a_whole_name_component():
    net = nn.Sequential(*[nn.Linear(2, 2) for _ in range(11)])
    cut = named_split(net, [[str(i) for i in range(10)], "10"])  # "1" must not take "10"
    assert cut.names[1] == ["10.weight", "10.bias"]


def test_even_split_balances_parameter_counts_at_module_boundaries():
    net = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10), nn.Linear(10, 10), nn.Linear(10, 10))
    cut = even_split(net, 2)
    assert cut.names == [["0.weight", "0.bias", "1.weight", "1.bias"], ["2.weight", "2.bias", "3.weight", "3.bias"]]
    big_first = nn.Sequential(nn.Linear(30, 30), nn.Linear(10, 10), nn.Linear(10, 10))
    assert [len(ps) for ps in even_split(big_first, 2).params] == [2, 4]


@pytest.mark.parametrize(("split", "message"), [
    ([["0"], ["nope"]], "split: stage 1: the model has no module or parameter named 'nope'"),
    ([["0", "2"], ["1"], ["4"]], "split: stage 1 ('1') holds no trainable parameter"),
    ([["0", "2"], ["2", "4"]], "split: parameter '2.weight' of stage 1 is also '2.weight' of stage 0"),
    ([["0"], ["2"]], "split: trainable parameter '4.weight' is in no stage"),
    ([["0"], []], "split: stage 1 names no module"),
    ([["0"], [3.5]], "split: stage 1: expected module-name prefixes or submodules, got float"),
    ([["0"], [nn.Linear(1, 1)]], "split: stage 1: a Linear that is not a submodule of the model"),
])
def test_mistakes_are_one_line(split, message):
    with pytest.raises(StalesimError) as e:
        named_split(_net(), split)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_a_parameter_tied_between_two_stages_is_refused():
    with pytest.raises(StalesimError, match=r"'head.weight' of stage 1 is also 'wte.weight' of stage 0; a "
                                            r"parameter shared between two stages"):
        named_split(Tied(), [["wte"], ["mid", "head"]])
    with pytest.raises(StalesimError, match=r"'head.weight' is tied to 'wte.weight' of stage 0"):
        named_split(Tied(), [["wte"], ["mid"]])
    with pytest.raises(StalesimError, match="shared between two stages"):
        even_split(Tied(), 2)
    ok = named_split(Tied(), [["wte", "head"], ["mid"]])  # tied within one stage is fine
    assert ok.names == [["wte.weight"], ["mid.weight", "mid.bias"]]


def test_even_split_needs_enough_modules():
    with pytest.raises(StalesimError, match="stages: 4 stages but the model has only 3 modules"):
        even_split(_net(), 4)
    with pytest.raises(StalesimError, match="stages: expected an integer >= 1"):
        even_split(_net(), 0)


def test_frozen_parameters_belong_to_no_stage():
    net = _net()
    net[4].requires_grad_(False)
    assert named_split(net, [["0"], ["2"]]).names == [["0.weight", "0.bias"], ["2.weight", "2.bias"]]
    assert torch.is_tensor(net[4].weight)
