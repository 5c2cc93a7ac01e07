"""Your own model (``--model pkg.module:factory``) -> a LayeredModel, and its checks."""

from __future__ import annotations

import sys
import types
import uuid

import pytest
import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.workloads.layered import LayeredModel
from stalesim.workloads.own import as_layered, build_own_model, check_own_model


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU()), nn.Linear(8, 3))


@pytest.fixture
def user_module():
    """A module of factories registered in sys.modules under a unique name."""
    name = f"ownmodels_{uuid.uuid4().hex[:8]}"
    mod = types.ModuleType(name)

    def shaped():
        seq = _net()
        seq.input_shape = (3, 2, 2)
        return seq

    def bad_forward():
        seq = nn.Sequential(nn.Linear(5, 2))
        seq.input_shape = (3,)
        return seq

    def random_init():
        return [nn.Linear(4, 4), nn.Linear(4, 2)]

    mod.shaped, mod.plain, mod.bad_forward, mod.random_init = shaped, _net, bad_forward, random_init
    mod.number = lambda: 3
    mod.module = lambda: nn.Linear(3, 3)
    sys.modules[name] = mod
    yield name
    del sys.modules[name]


def test_sequential_children_are_the_blocks(user_module):
    net = build_own_model(f"{user_module}:shaped")
    assert isinstance(net, LayeredModel)
    assert net.name == f"{user_module}:shaped" and len(net.block_names) == 2
    assert net.input_shape == (3, 2, 2) and net.weight_layers == [1, 1]
    assert check_own_model(net, "x") == 3


def test_input_shape_from_the_data_set_when_the_model_states_none(user_module):
    with pytest.raises(StalesimError, match=r"^--model: .*without an input shape.*give --dataset"):
        build_own_model(f"{user_module}:plain")
    assert build_own_model(f"{user_module}:plain", input_shape=(12,)).input_shape == (12,)


def test_seeded_build_is_identical_and_leaves_the_callers_rng(user_module):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_own_model(f"{user_module}:random_init", seed=5, input_shape=(4,))
    b = build_own_model(f"{user_module}:random_init", seed=5, input_shape=(4,))
    assert torch.equal(torch.rand(1), before)  # the factory drew inside a forked RNG
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = build_own_model(f"{user_module}:random_init", seed=6, input_shape=(4,))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


@pytest.mark.parametrize("attr, needle", [
    ("number", "returned a int; expected an nn.Sequential"),
    ("module", "returned an Linear that is not an nn.Sequential"),
])
def test_wrong_return_type_is_one_line(user_module, attr, needle):
    with pytest.raises(StalesimError) as exc:
        build_own_model(f"{user_module}:{attr}")
    assert str(exc.value).startswith("--model: ") and needle in str(exc.value)


def test_forward_that_does_not_fit_is_refused(user_module):
    net = build_own_model(f"{user_module}:bad_forward")
    with pytest.raises(StalesimError, match=r"^--model: .*a forward of an input of shape \(2, 3\) failed"):
        check_own_model(net, "m:f")


def test_layered_model_is_used_as_given():
    lm = LayeredModel.from_sequential(_net(), name="mine", input_shape=(12,))
    assert as_layered(lm, "m:f") is lm
    with pytest.raises(StalesimError, match="input_shape must be a tuple of integers"):
        as_layered(_net(), "m:f", input_shape=("a",))
