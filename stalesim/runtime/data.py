"""Datasets and the deterministic batch order shared by emulator and executor.

``batch_stream(cfg)(t) -> (x, y)`` gives global mini-batch t bitwise identically
in any process: the epoch's permutation is drawn from a generator seeded by
(seed, epoch), and CIFAR augmentation (random crop with 4-pixel zero padding,
horizontal flip) is done with tensor ops from a generator seeded by (seed, t).
Data is held in memory as uint8 (MNIST and CIFAR are small) and normalized per
batch.

Where data comes from: ``cfg.data_dir`` or ``$STALESIM_DATA`` (torchvision's raw
files; the MNIST/Fashion-MNIST ``.gz`` files are unpacked into a writable cache,
``$STALESIM_CACHE`` or ``~/.cache/stalesim``, never into the data dir), then the
cache itself, then torchvision's download into the cache. CIFAR-10 is read from
torchvision's ``cifar-10-batches-py`` layout or from ``.npz`` arrays (``x`` uint8
NHWC, ``y`` labels). With none of these, StalesimError says where it looked.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig

_STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
_TV_NAME = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
JPEG_NOTE = "CIFAR-10 JPEG-derived copy"


@dataclass
class Dataset:
    """In-memory dataset: images NCHW (uint8, or float for synthetic), int64 labels."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor | None
    test_y: torch.Tensor | None
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    augment: bool
    note: str

    @property
    def train_size(self) -> int:
        return int(self.train_x.shape[0])

    def prepare(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """uint8 -> normalized float of ``dtype`` (synthetic data passes through)."""
        if x.dtype == torch.uint8:
            x = x.to(dtype).div_(255.0)
            if self.mean is not None:
                mean = torch.tensor(self.mean, dtype=dtype).view(1, -1, 1, 1)
                std = torch.tensor(self.std, dtype=dtype).view(1, -1, 1, 1)
                x = (x - mean) / std
            return x
        return x.to(dtype)


def cache_dir() -> Path:
    return Path(os.environ.get("STALESIM_CACHE") or Path.home() / ".cache" / "stalesim")


def data_root(cfg: TrainConfig) -> Path | None:
    root = cfg.data_dir or os.environ.get("STALESIM_DATA")
    return Path(root).expanduser() if root else None


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing; stable across platforms)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)


# ------------------------------------------------------------------ loading
def load_dataset(cfg: TrainConfig, input_shape: tuple[int, int, int] | None = None) -> Dataset:
    """Load ``cfg.dataset`` (see the module doc for where it looks)."""
    if cfg.dataset == "synthetic":
        return synthetic_dataset(cfg, input_shape or (1, 28, 28))
    if cfg.dataset in _TV_NAME:
        return _load_idx(cfg)
    return _load_cifar(cfg)


def synthetic_dataset(cfg: TrainConfig, input_shape: tuple[int, int, int]) -> Dataset:
    """Seeded random inputs; labels from a fixed random linear map, so they are learnable."""
    g = torch.Generator().manual_seed(mix_seed(cfg.seed, 7919))
    n, n_test = cfg.synthetic_size, max(cfg.synthetic_size // 4, 1)
    x = torch.randn((n + n_test, *input_shape), generator=g)
    proj = torch.randn((int(np.prod(input_shape)), cfg.num_classes), generator=g)
    y = (x.flatten(1) @ proj).argmax(1)
    return Dataset("synthetic", x[:n], y[:n], x[n:], y[n:], None, None, False, "synthetic data")


def _prepare_idx(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for gz in src.glob("*.gz"):
        out = dst / gz.stem
        if not out.exists():
            tmp = out.with_suffix(f".tmp{os.getpid()}")
            with gzip.open(gz, "rb") as f, open(tmp, "wb") as g:
                shutil.copyfileobj(f, g)
            os.replace(tmp, out)
    for raw in src.iterdir():  # already unpacked files are copied as they are
        if not raw.name.endswith(".gz") and not (dst / raw.name).exists() and raw.is_file():
            shutil.copyfile(raw, dst / raw.name)


def _load_idx(cfg: TrainConfig) -> Dataset:
    from torchvision import datasets

    name = _TV_NAME[cfg.dataset]
    cls = datasets.MNIST if cfg.dataset == "mnist" else datasets.FashionMNIST
    cache = cache_dir()
    looked: list[str] = []
    root = data_root(cfg)
    if root is not None:
        src = root / name / "raw"
        looked.append(str(src))
        if src.is_dir() and any(src.iterdir()):
            _prepare_idx(src, cache / name / "raw")
    looked.append(str(cache / name / "raw"))
    try:
        train = cls(str(cache), train=True, download=False)
        test = cls(str(cache), train=False, download=False)
    except RuntimeError:
        train = test = None
    if train is None:
        train, test = _download(cls, cache, looked, cfg.dataset)
    mean, std = _STATS[cfg.dataset]
    return Dataset(cfg.dataset, train.data.unsqueeze(1).contiguous(), train.targets.long(),
                   test.data.unsqueeze(1).contiguous(), test.targets.long(), mean, std, False,
                   f"{name} (torchvision raw files)")


def _download(cls, cache: Path, looked: list[str], dataset: str):
    """torchvision's download into the cache (10 s socket timeout); ``STALESIM_NO_DOWNLOAD=1``
    skips it (offline machines, tests)."""
    if os.environ.get("STALESIM_NO_DOWNLOAD", "") not in ("", "0"):
        raise StalesimError(
            f"dataset: {dataset} not found (looked in {', '.join(looked)}); downloads are off "
            "(STALESIM_NO_DOWNLOAD); pass --data-dir or set STALESIM_DATA")
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(10)
    try:
        train = cls(str(cache), train=True, download=True)
        test = cls(str(cache), train=False, download=True)
        return train, test
    except Exception as exc:  # noqa: BLE001 - any download failure means "no data"
        raise StalesimError(
            f"dataset: {dataset} not found (looked in {', '.join(looked)}) and the download "
            f"failed ({type(exc).__name__}); pass --data-dir or set STALESIM_DATA"
        ) from None
    finally:
        socket.setdefaulttimeout(old)


def _npz_pair(d: Path) -> tuple[Path, Path] | None:
    for tr, te in (("cifar10_train.npz", "cifar10_test.npz"), ("train.npz", "test.npz")):
        if (d / tr).is_file() and (d / te).is_file():
            return d / tr, d / te
    return None


def _load_cifar(cfg: TrainConfig) -> Dataset:
    mean, std = _STATS["cifar10"]
    looked: list[str] = []
    root = data_root(cfg)
    cands = [] if root is None else [root, root / "CIFAR10", root / "cifar10"]
    cands += [cache_dir()]
    for d in cands:
        looked.append(str(d))
        pair = _npz_pair(d)
        if pair is not None:
            tr, te = np.load(pair[0]), np.load(pair[1])
            notes = d / "NOTES.md"
            jpeg = notes.is_file() and "jpeg" in notes.read_text(errors="ignore").lower()
            note = JPEG_NOTE if jpeg else f"CIFAR-10 from .npz arrays in {d}"
            return Dataset("cifar10", _nhwc(tr["x"]), torch.as_tensor(tr["y"]).long(),
                           _nhwc(te["x"]), torch.as_tensor(te["y"]).long(), mean, std, cfg.augment, note)
        if (d / "cifar-10-batches-py").is_dir():
            from torchvision import datasets

            train = datasets.CIFAR10(str(d), train=True, download=False)
            test = datasets.CIFAR10(str(d), train=False, download=False)
            return Dataset("cifar10", _nhwc(train.data), torch.as_tensor(train.targets).long(),
                           _nhwc(test.data), torch.as_tensor(test.targets).long(), mean, std,
                           cfg.augment, "CIFAR-10 (torchvision)")
    from torchvision import datasets

    train, test = _download(datasets.CIFAR10, cache_dir(), looked, "cifar10")
    return Dataset("cifar10", _nhwc(train.data), torch.as_tensor(train.targets).long(),
                   _nhwc(test.data), torch.as_tensor(test.targets).long(), mean, std, cfg.augment,
                   "CIFAR-10 (torchvision download)")


def _nhwc(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).contiguous()


# --------------------------------------------------------------- batches
def augment_batch(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop (zero padding ``pad``) and horizontal flip, per image, as tensor ops."""
    B, _, H, W = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    i = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    j = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    flip = torch.rand((B,), generator=gen) < 0.5
    ar_h, ar_w = torch.arange(H), torch.arange(W)
    rows = i[:, None] + ar_h[None, :]  # B x H
    cols = torch.where(flip[:, None], j[:, None] + (W - 1 - ar_w)[None, :], j[:, None] + ar_w[None, :])
    bidx = torch.arange(B)[:, None, None]
    out = xp.permute(0, 2, 3, 1)[bidx, rows[:, :, None], cols[:, None, :]]  # B H W C
    return out.permute(0, 3, 1, 2).contiguous()


class BatchStream:
    """Callable t -> (x, y): global mini-batch t (same bits in every process)."""

    def __init__(self, cfg: TrainConfig, data: Dataset) -> None:
        self.cfg = cfg
        self.data = data
        self.batch_size = cfg.batch_size
        self.batches_per_epoch = data.train_size // cfg.batch_size
        if self.batches_per_epoch < 1:
            raise StalesimError(
                f"batch_size: {cfg.batch_size} is larger than the training set ({data.train_size})"
            )
        self._perm_epoch = -1
        self._perm: torch.Tensor | None = None

    def permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, 104729, epoch))
            self._perm = torch.randperm(self.data.train_size, generator=g)
            self._perm_epoch = epoch
        return self._perm  # type: ignore[return-value]

    def __call__(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, k = divmod(int(t), self.batches_per_epoch)
        idx = self.permutation(epoch)[k * self.batch_size:(k + 1) * self.batch_size]
        x = self.data.train_x[idx]
        y = self.data.train_y[idx]
        if self.data.augment:
            g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, 15485863, t))
            x = augment_batch(x, g)
        return self.data.prepare(x, self.cfg.torch_dtype), y

    def labels(self, t: int) -> torch.Tensor:
        """The labels of mini-batch ``t`` (the ``y`` of ``self(t)``, without touching the images)."""
        epoch, k = divmod(int(t), self.batches_per_epoch)
        return self.data.train_y[self.permutation(epoch)[k * self.batch_size:(k + 1) * self.batch_size]]

    def part(self, t: int, lo: int, hi: int) -> torch.Tensor:
        """Samples ``lo:hi`` of mini-batch ``t``'s images, bit-identical to ``self(t)[0][lo:hi]``
        but in a storage of their own: without augmentation only those samples are read and
        prepared (preparation is per sample); augmentation draws for the whole batch, so it is
        applied to the batch and the slice copied."""
        if self.data.augment:
            return self(t)[0][lo:hi].clone()
        epoch, k = divmod(int(t), self.batches_per_epoch)
        idx = self.permutation(epoch)[k * self.batch_size:(k + 1) * self.batch_size][lo:hi]
        return self.data.prepare(self.data.train_x[idx], self.cfg.torch_dtype)

    def test_batches(self, batch_size: int = 1000):
        """Test set in order, normalized, no augmentation."""
        test_x, test_y = self.data.test_x, self.data.test_y
        if test_x is None or test_y is None:
            return
        n = test_x.shape[0]
        for a in range(0, n, batch_size):
            yield (self.data.prepare(test_x[a:a + batch_size], self.cfg.torch_dtype),
                   test_y[a:a + batch_size])


def batch_stream(cfg: TrainConfig, data: Dataset | None = None,
                 input_shape: tuple[int, int, int] | None = None) -> BatchStream:
    """The run's deterministic batch order (loads the dataset unless given)."""
    return BatchStream(cfg, data if data is not None else load_dataset(cfg, input_shape))


def shard(x: torch.Tensor, parts: int, index: int) -> torch.Tensor:
    """Equal part ``index`` of ``parts`` along the batch dimension (worker or micro-batch)."""
    n = x.shape[0] // parts
    return x[index * n:(index + 1) * n]


BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor]]
