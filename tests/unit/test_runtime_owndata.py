"""Your own data set (``--dataset pkg.module:factory``) -> checked in-memory tensors."""

from __future__ import annotations

import sys
import types
import uuid

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import batch_stream, dataset_input_shape, load_dataset
from stalesim.runtime.owndata import as_dataset, load_own_dataset


class Pairs(Dataset):
    """A map-style data set of (x, int) pairs, as torchvision's are."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((2, 3), float(i)), i % 4


def _tensors(n: int = 40):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 3, 3, generator=g), torch.randint(0, 3, (n,), generator=g)


@pytest.fixture
def data_module():
    name = f"owndata_{uuid.uuid4().hex[:8]}"
    mod = types.ModuleType(name)
    x, y = _tensors()
    mod.pair = lambda: (TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:]))
    mod.random = lambda: TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    sys.modules[name] = mod
    load_own_dataset.cache_clear()
    yield name
    del sys.modules[name]
    load_own_dataset.cache_clear()


def test_tensor_datasets_used_as_given(data_module):
    d = load_own_dataset(f"{data_module}:pair")
    x, y = _tensors()
    assert torch.equal(d.train_x, x[:32]) and torch.equal(d.test_y, y[32:]) and d.train_size == 32


def test_generic_dataset_is_read_item_by_item():
    d = as_dataset(Pairs(6), "m:f")
    assert d.train_x.shape == (6, 2, 3) and d.train_y.tolist() == [0, 1, 2, 3, 0, 1] and d.test_x is None
    assert d.train_y.dtype == torch.int64


def test_random_data_is_the_same_in_every_process(data_module):
    """The factory runs under the run's seed, so every rank that loads it draws the same."""
    a = load_own_dataset(f"{data_module}:random", 3)
    load_own_dataset.cache_clear()
    b = load_own_dataset(f"{data_module}:random", 3)
    c = load_own_dataset(f"{data_module}:random", 4)
    assert torch.equal(a.train_x, b.train_x) and not torch.equal(a.train_x, c.train_x)


def test_stream_and_shape_through_the_config(data_module):
    cfg = TrainConfig(model="lenet5", dataset=f"{data_module}:pair", iterations=2, batch_size=8).check()
    assert dataset_input_shape(cfg) == (1, 3, 3)
    data = load_dataset(cfg)
    assert data.note == f"user data set {data_module}:pair" and not data.augment
    stream = batch_stream(cfg, data)
    x, _ = stream(0)
    assert stream.batches_per_epoch == 4 and x.shape == (8, 1, 3, 3) and x.dtype == torch.float32
    assert sum(b[0].shape[0] for b in stream.test_batches()) == 8


@pytest.mark.parametrize("got, needle", [
    (42, "returned int for the train set"),
    (TensorDataset(torch.randn(4, 2), torch.rand(4)), "labels must be one integer class per sample"),
    (TensorDataset(torch.randn(4, 2), torch.tensor([0, 1, -1, 0])), "classes >= 0"),
    (TensorDataset(torch.randn(0, 2), torch.zeros(0, dtype=torch.long)), "has 0 inputs"),
    (TensorDataset(torch.randn(4), torch.zeros(4, dtype=torch.long)), "per-sample shape"),
    (TensorDataset(torch.zeros(4, 2, dtype=torch.int32), torch.zeros(4, dtype=torch.long)), "must be float"),
    ((TensorDataset(torch.randn(4, 2), torch.zeros(4, dtype=torch.long)),
      TensorDataset(torch.randn(4, 3), torch.zeros(4, dtype=torch.long))), "test inputs are (3,)"),
    ([(torch.zeros(2), 0), (torch.zeros(3), 1)], "inputs differ in shape"),
    ([torch.zeros(2)], "expected an (x, y) pair"),
])
def test_bad_data_sets_are_one_line(got, needle):
    with pytest.raises(StalesimError) as exc:
        as_dataset(got, "m:f")
    assert str(exc.value).startswith("--dataset: ") and needle in str(exc.value), str(exc.value)
