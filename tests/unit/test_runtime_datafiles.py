"""Dataset files: a given data folder is the only source, the cache is verified, bad files are
one-line errors naming the file. Tiny IDX/.npz files in tmp folders stand in for the real
data (whose MD5s are swapped for the tiny files' own); the real data is only used through
the ``real_data_dir`` fixture."""

from __future__ import annotations

import gzip
import hashlib
import json
import struct

import numpy as np
import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.runtime import datafiles as df
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.data import load_dataset

N_TRAIN, N_TEST = 6, 3


def _idx_images(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return struct.pack(">IIII", 0x803, n, 28, 28) + rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes()


def _idx_labels(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return struct.pack(">II", 0x801, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes()


def _md5(b: bytes) -> str:
    return hashlib.md5(b, usedforsecurity=False).hexdigest()


@pytest.fixture
def tiny_mnist(tmp_path, monkeypatch):
    """A data folder with tiny (valid) MNIST files; the expected MD5s are theirs."""
    raw = {"train-images-idx3-ubyte": _idx_images(N_TRAIN, 1), "train-labels-idx1-ubyte": _idx_labels(N_TRAIN, 2),
           "t10k-images-idx3-ubyte": _idx_images(N_TEST, 3), "t10k-labels-idx1-ubyte": _idx_labels(N_TEST, 4)}
    src = tmp_path / "data" / "MNIST" / "raw"
    src.mkdir(parents=True)
    files = []
    for name, data in raw.items():
        gz = gzip.compress(data, mtime=0)
        (src / f"{name}.gz").write_bytes(gz)
        files.append(df.IdxFile(name, _md5(gz), _md5(data)))
    monkeypatch.setattr(df, "idx_files", lambda dataset: files)
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STALESIM_NO_DOWNLOAD", "1")
    monkeypatch.delenv("STALESIM_DATA", raising=False)
    return tmp_path / "data", raw


def _cfg(data_dir=None, dataset="mnist") -> TrainConfig:
    return TrainConfig(dataset=dataset, data_dir=None if data_dir is None else str(data_dir), iterations=1,
                       batch_size=2)


def _no_temporaries(root):
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_verified_files_are_unpacked_into_the_cache(tiny_mnist, tmp_path):
    data_dir, raw = tiny_mnist
    ds = load_dataset(_cfg(data_dir))
    assert ds.train_x.shape == (N_TRAIN, 1, 28, 28) and ds.test_x.shape == (N_TEST, 1, 28, 28)
    cached = tmp_path / "cache" / "MNIST" / "raw"
    assert (cached / "train-images-idx3-ubyte").read_bytes() == raw["train-images-idx3-ubyte"]
    assert not _no_temporaries(tmp_path)
    # the cache alone (no data folder) is accepted once it is complete and verified
    again = load_dataset(_cfg(None))
    assert torch.equal(again.train_x, ds.train_x)


def test_corrupt_archive_is_an_error_naming_it(tiny_mnist, tmp_path):
    data_dir, _ = tiny_mnist
    bad = data_dir / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    bad.write_bytes(b"this is not gzip")
    with pytest.raises(StalesimError, match="does not match torchvision") as info:
        load_dataset(_cfg(data_dir))
    msg = str(info.value)
    assert str(bad) in msg and "\n" not in msg and "--data-dir" in msg
    assert not (tmp_path / "cache" / "MNIST" / "raw" / "train-labels-idx1-ubyte").exists()
    assert not _no_temporaries(tmp_path)


def test_truncated_archive_is_an_error_naming_it(tiny_mnist):
    data_dir, _ = tiny_mnist
    gz = data_dir / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:100])
    with pytest.raises(StalesimError, match=str(gz)):
        load_dataset(_cfg(data_dir))


def test_empty_folder_names_the_missing_file(tiny_mnist):
    data_dir, _ = tiny_mnist
    for p in (data_dir / "MNIST" / "raw").iterdir():
        p.unlink()
    with pytest.raises(StalesimError, match=r"train-images-idx3-ubyte\.gz: missing"):
        load_dataset(_cfg(data_dir))


def test_a_data_folder_without_the_dataset_does_not_fall_back_to_the_cache(tiny_mnist, tmp_path):
    data_dir, _ = tiny_mnist
    load_dataset(_cfg(data_dir))  # fills the cache with verified files
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    with pytest.raises(StalesimError, match=f"not found \\(looked in {empty}"):
        load_dataset(_cfg(empty))


@pytest.mark.parametrize("damage", [b"garbage", b"", "truncated"])
def test_a_warm_cache_does_not_mask_a_corrupt_data_folder(tiny_mnist, tmp_path, damage):
    """Bad-input probe: with a verified cache from an earlier run, a corrupt,
    empty or truncated file in the given folder must still be an error naming it."""
    data_dir, _ = tiny_mnist
    load_dataset(_cfg(data_dir))  # fills the cache with verified files
    gz = data_dir / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:10] if damage == "truncated" else damage)
    with pytest.raises(StalesimError, match=f"{gz}: MD5 .* does not match"):
        load_dataset(_cfg(data_dir))


def test_a_poisoned_cache_is_repaired_from_the_data_folder(tiny_mnist, tmp_path):
    data_dir, raw = tiny_mnist
    cached = tmp_path / "cache" / "MNIST" / "raw"
    cached.mkdir(parents=True)
    for name in raw:
        (cached / name).write_bytes(b"garbage from an earlier bad run")
    ds = load_dataset(_cfg(data_dir))
    assert ds.train_size == N_TRAIN
    assert all((cached / n).read_bytes() == b for n, b in raw.items())


def test_a_poisoned_cache_without_a_data_folder_is_not_used(tiny_mnist, tmp_path):
    _, raw = tiny_mnist
    cached = tmp_path / "cache" / "MNIST" / "raw"
    cached.mkdir(parents=True)
    for name, data in raw.items():
        (cached / name).write_bytes(data)
    (cached / "t10k-labels-idx1-ubyte").write_bytes(b"")  # torn
    with pytest.raises(StalesimError, match="downloads are off"):
        load_dataset(_cfg(None))
    assert not (cached / "t10k-labels-idx1-ubyte").exists()  # removed, so it is never trusted


@pytest.mark.parametrize("payload,err", [(b"\x1f\x8b\x08\x00garbage-after-header", "BadGzipFile|zlib|not a valid gzip"),
                                          (None, "EOFError")])
def test_bad_gzip_streams_are_one_line_and_leave_no_file(tmp_path, payload, err):
    gz = tmp_path / "x.gz"
    gz.write_bytes(payload if payload is not None else gzip.compress(b"x" * 10000)[:30])
    f = df.IdxFile("x", _md5(gz.read_bytes()), "0" * 32)
    with pytest.raises(StalesimError, match=err) as info:
        df._gunzip_verified(gz, tmp_path / "out" / "x", f, "mnist")
    assert str(gz) in str(info.value)
    assert list((tmp_path / "out").iterdir()) == []


def test_unpacked_data_with_the_wrong_md5_is_refused(tmp_path):
    gz = tmp_path / "x.gz"
    gz.write_bytes(gzip.compress(b"not the real thing"))
    f = df.IdxFile("x", _md5(gz.read_bytes()), "0" * 32)
    with pytest.raises(StalesimError, match="is not the mnist file"):
        df._gunzip_verified(gz, tmp_path / "x", f, "mnist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.gz"]


# ------------------------------------------------------------------ CIFAR-10 .npz
def _npz(path, x, y, **extra):
    np.savez(path, x=x, y=y, **extra)


def _good(n=4):
    return np.zeros((n, 32, 32, 3), np.uint8), np.arange(n, dtype=np.uint8) % 10


@pytest.fixture
def cifar_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STALESIM_NO_DOWNLOAD", "1")
    d = tmp_path / "data" / "CIFAR10"
    d.mkdir(parents=True)
    _npz(d / "cifar10_train.npz", *_good(4))
    _npz(d / "cifar10_test.npz", *_good(2))
    return tmp_path / "data"


def test_cifar_npz_is_checked_and_loaded(cifar_dir):
    ds = load_dataset(_cfg(cifar_dir, "cifar10"))
    assert ds.train_x.shape == (4, 3, 32, 32) and ds.test_y.tolist() == [0, 1]


@pytest.mark.parametrize("case,match", [
    ("float", "x must be uint8"),
    ("shape", r"x must be uint8 \[N, 32, 32, 3\]"),
    ("labels", "labels must be in 0..9, found 0..12"),
    ("length", "y must be integer labels"),
    ("notzip", "not a readable .npz"),
    ("nokey", "expected arrays 'x' and 'y'"),
    ("pickle", "not a readable .npz"),
    ("empty", "not a readable .npz"),
])
def test_bad_cifar_npz_is_an_error_naming_the_file(cifar_dir, case, match):
    p = cifar_dir / "CIFAR10" / "cifar10_train.npz"
    x, y = _good(4)
    if case == "float":
        _npz(p, x.astype(np.float32), y)
    elif case == "shape":
        _npz(p, np.zeros((4, 3, 32, 32), np.uint8), y)
    elif case == "labels":
        _npz(p, x, np.array([0, 1, 2, 12]))
    elif case == "length":
        _npz(p, x, y[:3])
    elif case == "notzip":
        p.write_bytes(b"PK\x03\x04 truncated")
    elif case == "nokey":
        np.savez(p, x=x)
    elif case == "pickle":
        np.savez(p, x=np.array([{"a": 1}], dtype=object), y=y)
    else:
        p.write_bytes(b"")
    with pytest.raises(StalesimError, match=match) as info:
        load_dataset(_cfg(cifar_dir, "cifar10"))
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_cifar_missing_from_the_data_folder_does_not_fall_back(cifar_dir, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    _npz(cache / "cifar10_train.npz", *_good(4))  # a usable cache must not be picked silently
    _npz(cache / "cifar10_test.npz", *_good(2))
    with pytest.raises(StalesimError, match="cifar10 not found"):
        load_dataset(_cfg(tmp_path / "nothing", "cifar10"))


def test_cli_reports_a_corrupt_data_folder_in_one_line(tiny_mnist, capsys):
    from stalesim.cli import main

    data_dir, _ = tiny_mnist
    (data_dir / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").write_bytes(b"")
    rc = main(["emulate", "--model", "lenet5", "--dataset", "mnist", "--data-dir", str(data_dir),
               "--iterations", "1", "--batch-size", "2", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: ")
    assert "t10k-images-idx3-ubyte.gz" in err[0]


@pytest.mark.data
def test_real_data_repairs_a_poisoned_cache(real_data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path))
    cached = tmp_path / "MNIST" / "raw"
    cached.mkdir(parents=True)
    for name in df.RAW_MD5["mnist"]:
        (cached / name).write_bytes(b"\0" * 16)  # what an older version could leave behind
    ds = load_dataset(_cfg(real_data_dir))
    assert ds.train_size == 60000 and ds.test_x.shape[0] == 10000
    assert json.dumps(sorted(p.name for p in cached.iterdir())) == json.dumps(sorted(df.RAW_MD5["mnist"]))
