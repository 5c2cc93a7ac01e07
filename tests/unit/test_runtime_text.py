"""Character text data: vocabulary, split, deterministic windows, validation windows, errors."""

from __future__ import annotations

import gzip

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import batch_stream
from stalesim.runtime.tasks import evaluate, loss_fn, task_of
from stalesim.runtime.text import ascii_tensor, load_text, text_stream

TINY = "gpt-char:n_layer=1,n_embd=8,n_head=2,block_size=8"


def _cfg(**kw) -> TrainConfig:
    base = dict(model=TINY, dataset="synthetic", iterations=3, batch_size=4, synthetic_size=16,  # noqa: C408
                eval_windows=5)
    base.update(kw)
    return TrainConfig(**base).check()


def test_windows_are_shifted_by_one_and_deterministic_per_batch_index():
    cfg = _cfg()
    s1 = batch_stream(cfg)
    s2 = batch_stream(cfg)  # e.g. another process
    assert type(s1).__name__ == "TextStream" and task_of(cfg) == "lm"
    x5, y5 = s1(5)
    s1(0), s1(99)  # order of calls does not matter
    x5b, y5b = s2(5)
    assert torch.equal(x5, x5b) and torch.equal(y5, y5b)
    assert x5.shape == (4, 8) and x5.dtype == torch.long and y5.shape == (4, 8)
    assert torch.equal(x5[:, 1:], y5[:, :-1])
    assert not torch.equal(s1(6)[0], x5)
    other = batch_stream(_cfg(seed=1))
    assert not torch.equal(other(5)[0], x5)
    # the windows are contiguous text of the training split
    train = s1.data.train.long()
    for row_x, row_y in zip(x5, y5):
        text = torch.cat([row_x, row_y[-1:]])
        starts = [i for i in range(train.numel() - 8) if torch.equal(train[i:i + 9], text)]
        assert starts


def test_validation_windows_are_fixed_evenly_spaced_and_seed_independent():
    s = batch_stream(_cfg())
    starts = s.eval_starts()
    assert starts.numel() == 5 and starts[0] == 0 and starts[-1] == s.data.val.numel() - 9
    batches = list(s.test_batches(2))
    assert [b[0].shape[0] for b in batches] == [2, 2, 1]
    assert torch.equal(torch.cat([b[0] for b in batches]), next(iter(s.test_batches(5)))[0])


def test_lm_loss_and_bits_per_character():
    logits = torch.zeros(2, 3, 128)
    y = torch.randint(0, 128, (2, 3))
    assert float(loss_fn("lm")(logits, y)) == pytest.approx(torch.log(torch.tensor(128.0)).item())
    res = evaluate(lambda x: torch.zeros(*x.shape, 128), [(y, y)], torch.device("cpu"), "lm")
    assert res["val_loss"] == pytest.approx(4.852030263919617)
    assert res["val_bpc"] == pytest.approx(7.0)  # log2(128): uniform over the ASCII vocabulary


def test_non_ascii_text_is_refused():
    with pytest.raises(StalesimError, match="non-ASCII byte 0xc3 at offset 3"):
        ascii_tensor("abcé".encode(), "x.txt")


def test_missing_and_given_files(tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    cfg = _cfg(dataset="shakespeare", data_dir=str(tmp_path))
    with pytest.raises(StalesimError, match="^dataset: shakespeare not found"):
        load_text(cfg, 8)
    d = tmp_path / "shakespeare"
    d.mkdir()
    text = b"To be, or not to be, that is the question.\n" * 10
    (d / "shakespeare_complete.txt.gz").write_bytes(gzip.compress(text))
    data = load_text(cfg, 8)
    assert data.train_size == int(len(text) * 0.9) and data.val.numel() == len(text) - data.train_size
    assert bytes(data.train[:5].tolist()) == b"To be"
    with pytest.raises(StalesimError, match="block_size 64 needs windows of 65"):
        text_stream(cfg, 64, data)


def test_a_given_data_folder_is_the_only_source(tmp_path, monkeypatch):
    """As for the datasets: a text in the cache is not used when
    --data-dir is given and lacks it; an empty file is one line (torch.frombuffer raised)."""
    cache = tmp_path / "cache"
    (cache / "shakespeare").mkdir(parents=True)
    (cache / "shakespeare" / "shakespeare_complete.txt").write_bytes(b"cached text " * 100)
    monkeypatch.setenv("STALESIM_CACHE", str(cache))
    monkeypatch.delenv("STALESIM_DATA", raising=False)
    given = tmp_path / "data"
    given.mkdir()
    with pytest.raises(StalesimError, match=f"^dataset: shakespeare not found .*in {given}"):
        load_text(_cfg(dataset="shakespeare", data_dir=str(given)), 8)
    assert load_text(_cfg(dataset="shakespeare", data_dir=None), 8).train_size == 1080  # no folder: the cache
    (given / "shakespeare_complete.txt.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(StalesimError, match="holds no text"):
        load_text(_cfg(dataset="shakespeare", data_dir=str(given)), 8)


def test_real_shakespeare(real_data_dir):
    cfg = _cfg(dataset="shakespeare", data_dir=str(real_data_dir), model="gpt-char", batch_size=32)
    s = batch_stream(cfg)
    assert s.data.train_size + s.data.val.numel() == 5_057_321
    assert s.data.train_size == 4_551_588
    assert s.batches_per_epoch == 4_551_588 // (32 * 128)
    assert len(torch.unique(torch.cat([s.data.train, s.data.val]))) == 84
    x, y = s(0)
    assert x.shape == y.shape == (32, 128) and int(x.max()) < 128
