"""A user's factories whose products are wrong: data set items of the wrong kind, labels a zoo
model cannot take, blocks that return a tuple, None, an integer tensor or logits of another batch
size. Each is one StalesimError naming the flag and the factory (and the item or block), raised
before training or at the forward that shows it, never a torch error from inside stalesim
(stalesim.runtime.owndata, stalesim.runtime.build.check_own_code, stalesim.workloads.own)."""

from __future__ import annotations

import copy
import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.owndata import as_dataset
from stalesim.workloads.own import as_layered, check_own_model


class Items(Dataset):  # type: ignore[type-arg]
    """A map-style data set whose item ``i`` is ``item(i)``."""

    def __init__(self, item: Callable[[int], Any], n: int = 8) -> None:
        self.item, self.n = item, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return self.item(i)


class NegativeLength(Items):
    def __len__(self) -> int:
        return -1


def _exits(i: int) -> Any:
    raise SystemExit(3)


def _raises_at_5(i: int) -> Any:
    if i == 5:
        raise KeyError("boom")
    return torch.zeros(2), 0


X = torch.zeros(8, 2)
NAN = X.clone()
NAN[3, 1] = float("nan")
BAD_DATA = [
    ("str input", Items(lambda i: ("abc", 1)), "train item 0's input is str, expected a tensor or numbers"),
    ("None input", Items(lambda i: (None, 1)), "train item 0's input is NoneType"),
    ("str label", Items(lambda i: (torch.zeros(2), "cat")), "train item 0's label is str"),
    ("dict input", Items(lambda i: ({"a": 1}, 1)), "train item 0's input is dict, expected a tensor or numbers"),
    ("negative len", NegativeLength(lambda i: (torch.zeros(2), 0)),
     "reading len() of the train set raised ValueError: __len__() should return >= 0"),
    ("getitem raises", Items(_raises_at_5), "reading train item 5 raised KeyError: 'boom'"),
    ("getitem exits", Items(_exits), "reading train item 0 called sys.exit(3)"),
    ("labels of two shapes", Items(lambda i: (torch.zeros(2), [0] if i else 0)), "train labels differ in shape"),
    ("bool labels", TensorDataset(X, torch.zeros(8, dtype=torch.bool)),
     "labels must be integer classes, got torch.bool"),
    ("NaN input", TensorDataset(NAN, torch.zeros(8, dtype=torch.long)), "train input 3 holds NaN or infinity"),
]


@pytest.mark.parametrize("ds,needle", [(d, n) for _, d, n in BAD_DATA], ids=[c[0] for c in BAD_DATA])
def test_bad_data_set_items_are_one_line_naming_the_factory(ds: Any, needle: str) -> None:
    with pytest.raises(StalesimError) as exc:
        as_dataset(ds, "pkg.mod:data")
    msg = str(exc.value)
    assert msg.startswith("--dataset: pkg.mod:data: ") and needle in msg and "\n" not in msg, msg


def test_good_items_still_load() -> None:
    got = as_dataset(Items(lambda i: ([0.5, float(i)], i % 3)), "pkg.mod:data")
    assert got.train_x.shape == (8, 2) and got.train_y.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


# ------------------------------------------------------------------ a zoo model given the user's data set
DATA_MODULE = """
import torch
from torch.utils.data import TensorDataset

def _set(shape, top):
    x = torch.rand((16, *shape), generator=torch.Generator().manual_seed(0))
    y = torch.arange(16) % 10
    y[7] = top
    return TensorDataset(x, y)

def labels_999():
    return _set((1, 28, 28), 999)

def cifar_shaped():
    return _set((3, 32, 32), 9)

def fine():
    return _set((1, 28, 28), 9)

def test_labels_999():
    return fine(), _set((1, 28, 28), 999)
"""
_SERIAL = itertools.count()


@pytest.fixture
def data_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh module of data factories (a new name per test: the loader caches per spec)."""
    name = f"rel48_data_{next(_SERIAL)}_{abs(hash(str(tmp_path))) % 10**6}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(DATA_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize("factory,needle", [
    ("labels_999", "has labels up to class 999, but model lenet5 has 10 classes (labels 0..9)"),
    ("test_labels_999", "has labels up to class 999, but model lenet5 has 10 classes"),
    ("cifar_shaped", "has inputs of shape (3, 32, 32), but model lenet5 reads (1, 28, 28)"),
])
def test_a_zoo_model_refuses_data_it_cannot_take(data_module: str, factory: str, needle: str) -> None:
    """The labels beyond the zoo model's head trained into ``IndexError: Target 999 is out of bounds``."""
    from stalesim.runtime.build import check_own_code

    cfg = TrainConfig(model="lenet5", dataset=f"{data_module}:{factory}", batch_size=4, iterations=2)
    with pytest.raises(StalesimError) as exc:
        check_own_code(cfg)
    assert str(exc.value).startswith(f"--dataset: {data_module}:{factory} ") and needle in str(exc.value)
    check_own_code(TrainConfig(model="lenet5", dataset=f"{data_module}:fine", batch_size=4, iterations=2))


# ------------------------------------------------------------------ the user's blocks return the wrong thing
class Tuple(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x, x


class Nothing(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return None


class Integer(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x.long()


class HalfBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x[: max(1, x.shape[0] // 2)]


class TupleBeyondTwo(nn.Module):
    """Right for the check's batch of 2, a tuple for any other: caught at the forward that shows it."""

    def forward(self, x: torch.Tensor) -> Any:
        return x if x.shape[0] == 2 else (x,)


def _blocks(mid: nn.Module | None = None, last: nn.Module | None = None) -> nn.Sequential:
    seq = nn.Sequential(nn.Flatten(), mid or nn.Identity(), nn.Linear(4, 3), last or nn.Identity())
    seq.input_shape = (4,)  # type: ignore[assignment]
    return seq


WRONG = [
    ("tuple", _blocks(mid=Tuple()), "block 'block1' returned a tuple; a block must return one tensor"),
    ("None last", _blocks(last=Nothing()), "block 'block3' returned None"),
    ("integer", _blocks(last=Integer()), "block 'block3' returned a torch.int64 tensor"),
    ("batch", _blocks(last=HalfBatch()), "block 'block3' (the last) returned shape (1, 3) from an input of "
                                        "shape (2, 3); expected (batch, classes) logits"),
]


@pytest.mark.parametrize("seq,needle", [(s, n) for _, s, n in WRONG], ids=[w[0] for w in WRONG])
def test_wrong_block_outputs_are_one_line_naming_the_factory_and_block(seq: nn.Sequential, needle: str) -> None:
    model = as_layered(seq, "pkg.mod:net")
    with pytest.raises(StalesimError) as exc:
        check_own_model(model, "pkg.mod:net")
    assert str(exc.value).startswith("--model: pkg.mod:net: ") and needle in str(exc.value), str(exc.value)


def test_a_block_wrong_only_at_other_batch_sizes_is_caught_where_it_runs() -> None:
    """The check's batch of 2 passes; the emulator's or a rank's batch of 4 (a worker's deep copy,
    as the data-parallel schedules make) is refused at the block, not by the next block's torch error."""
    model = as_layered(_blocks(mid=TupleBeyondTwo()), "pkg.mod:net")
    assert check_own_model(model, "pkg.mod:net") == 3
    worker = copy.deepcopy(model)
    with pytest.raises(StalesimError, match=r"^--model: pkg.mod:net: block 'block1' returned a tuple"):
        worker(torch.zeros(4, 4))


def test_the_fence_keeps_parameter_names_and_is_added_once() -> None:
    from stalesim.workloads.layered import LayeredModel

    names = list(LayeredModel.from_sequential(_blocks(), name="plain", input_shape=(4,)).state_dict())
    model = as_layered(_blocks(), "pkg.mod:net")
    again = as_layered(model, "pkg.mod:net")  # a LayeredModel returned by the factory is fenced too
    assert list(model.state_dict()) == names
    assert all(len(b._forward_hooks) == 1 for b in again.blocks)
    out = model(torch.ones(5, 4))
    assert out.shape == (5, 3) and out.dtype == torch.float32


class RaisesBeyondTwo(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        if x.shape[0] != 2:
            raise ValueError("my block takes pairs")
        return x


def test_what_a_block_raises_while_training_is_one_line_naming_it() -> None:
    """(A ``sys.exit()`` in a block is left to the entry point, which names the user's file and line.)"""
    from stalesim.workloads.own import UserBlockError

    block = RaisesBeyondTwo()
    model = as_layered(_blocks(mid=block), "pkg.mod:net")
    assert check_own_model(model, "pkg.mod:net") == 3
    with pytest.raises(UserBlockError) as exc:
        copy.deepcopy(model)(torch.zeros(4, 4))
    assert str(exc.value) == "--model: pkg.mod:net: block 'block1' raised ValueError: my block takes pairs"
    assert isinstance(exc.value.cause, ValueError)
    assert isinstance(model.blocks[1], RaisesBeyondTwo) and type(model.blocks[1]).__name__ == "RaisesBeyondTwo"


class AlwaysRaises(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        raise ValueError("my block takes pairs")


def test_the_check_forward_keeps_its_message_for_a_block_that_fails_on_the_input_shape() -> None:
    with pytest.raises(StalesimError, match=r"^--model: pkg.mod:net: a forward of an input of shape \(2, 4\) "
                                            r"failed: ValueError: my block takes pairs$"):
        check_own_model(as_layered(_blocks(mid=AlwaysRaises()), "pkg.mod:net"), "pkg.mod:net")
