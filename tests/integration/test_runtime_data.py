"""Deterministic batches, augmentation, data discovery and the offline error."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import JPEG_NOTE, augment_batch, batch_stream, load_dataset, shard


def test_synthetic_batches_are_deterministic_and_epoch_permuted():
    cfg = TrainConfig(dataset="synthetic", synthetic_size=64, batch_size=16, epochs=2)
    a, b = batch_stream(cfg, input_shape=(1, 4, 4)), batch_stream(cfg, input_shape=(1, 4, 4))
    for t in (0, 3, 4, 7):
        xa, ya = a(t)
        xb, yb = b(t)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert a.batches_per_epoch == 4
    e0 = torch.cat([a(t)[1] for t in range(4)])
    e1 = torch.cat([a(t)[1] for t in range(4, 8)])
    assert sorted(e0.tolist()) == sorted(e1.tolist()) and not torch.equal(e0, e1)
    assert shard(torch.arange(8), 2, 1).tolist() == [4, 5, 6, 7]


def test_augment_crop_and_flip():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    g = torch.Generator().manual_seed(0)
    y = augment_batch(x, g, pad=0)  # no padding: only flips
    for i in range(2):
        assert torch.equal(y[i], x[i]) or torch.equal(y[i], x[i].flip(-1))
    y1 = augment_batch(x, torch.Generator().manual_seed(5))
    y2 = augment_batch(x, torch.Generator().manual_seed(5))
    assert torch.equal(y1, y2) and y1.shape == x.shape


def test_offline_without_data_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("STALESIM_DATA", raising=False)
    from stalesim.runtime import data

    def no_net(cls, cache, looked, dataset):
        raise StalesimError(f"dataset: {dataset} not found (looked in {', '.join(looked)})")

    monkeypatch.setattr(data, "_download", no_net)
    cfg = TrainConfig(dataset="mnist", data_dir=str(tmp_path / "nothing"), epochs=1)
    with pytest.raises(StalesimError, match="looked in .*nothing"):
        load_dataset(cfg)


@pytest.mark.data
def test_real_mnist_and_cifar(real_data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path))
    cfg = TrainConfig(dataset="mnist", data_dir=str(real_data_dir), epochs=1)
    bs = batch_stream(cfg)
    x, y = bs(0)
    assert x.shape == (128, 1, 28, 28) and bs.data.train_size == 60000
    assert bs.data.test_x.shape[0] == 10000
    assert not any(p.suffix != ".gz" for p in (real_data_dir / "MNIST" / "raw").iterdir())
    cfg = TrainConfig(dataset="cifar10", data_dir=str(real_data_dir), epochs=1)
    bs = batch_stream(cfg)
    assert bs.data.note == JPEG_NOTE
    x, y = bs(3)
    assert x.shape == (128, 3, 32, 32) and torch.equal(x, bs(3)[0])
