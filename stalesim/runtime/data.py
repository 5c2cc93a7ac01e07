"""Datasets and the deterministic batch order shared by emulator and executor.

``batch_stream(cfg)(t) -> (x, y)`` gives global mini-batch t bitwise identically
in any process: the epoch's permutation is drawn from a generator seeded by
(seed, epoch), and CIFAR augmentation (random crop with 4-pixel zero padding,
horizontal flip) is done with tensor ops from a generator seeded by (seed, t).
Data is held in memory as uint8 (MNIST and CIFAR are small) and normalized per
batch.

Where data comes from: ``cfg.data_dir`` or ``$STALESIM_DATA`` if set, and then
*only* there (torchvision's raw files; the MNIST/Fashion-MNIST ``.gz`` files are
checked against torchvision's MD5s and unpacked into a writable cache,
``$STALESIM_CACHE`` or ``~/.cache/stalesim``, never into the data dir); with no
data folder, the verified cache, then torchvision's download into the cache.
CIFAR-10 is read from torchvision's ``cifar-10-batches-py`` layout or from
``.npz`` arrays (``x`` uint8 NHWC, ``y`` labels), checked. A missing, corrupt,
truncated or empty data set is a one-line StalesimError naming the file or the
folders it looked in. The checks are in :mod:`stalesim.runtime.datafiles`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.datapaths import cache_dir, data_root, mix_seed  # noqa: F401  (re-exported)

_STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
_TV_NAME = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
# per-sample input shape of the built-in image data sets (known without loading them)
INPUT_SHAPES: dict[str, tuple[int, ...]] = {"mnist": (1, 28, 28), "fashion-mnist": (1, 28, 28),
                                            "cifar10": (3, 32, 32)}
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


# ------------------------------------------------------------------ loading
def load_dataset(cfg: TrainConfig, input_shape: tuple[int, ...] | None = None) -> Dataset:
    """Load ``cfg.dataset`` (see the module doc for where it looks; a user's data set,
    ``pkg.module:factory``, comes from :mod:`stalesim.runtime.owndata`)."""
    from stalesim.plugins import is_plugin

    if is_plugin(cfg.dataset):
        from stalesim.runtime.owndata import load_own_dataset

        own = load_own_dataset(cfg.dataset, cfg.seed)  # used as given: no augmentation, no normalising
        return Dataset(cfg.dataset, own.train_x, own.train_y, own.test_x, own.test_y, None, None, False,
                       f"user data set {cfg.dataset}")
    if cfg.dataset == "synthetic":
        return synthetic_dataset(cfg, input_shape or (1, 28, 28))
    if cfg.dataset in _TV_NAME:
        return _load_idx(cfg)
    return _load_cifar(cfg)


def dataset_input_shape(cfg: TrainConfig) -> tuple[int, ...] | None:
    """Per-sample input shape of ``cfg.dataset`` (see :func:`input_shape_of`)."""
    return input_shape_of(cfg.dataset, cfg.seed)


def input_shape_of(dataset: str | None, seed: int = 0) -> tuple[int, ...] | None:
    """Per-sample input shape of a data set: the built-in image sets' (known), a user's
    (loaded once per process), None for synthetic and text data (the model's decides)."""
    from stalesim.plugins import is_plugin

    if dataset is not None and is_plugin(dataset):
        from stalesim.runtime.owndata import own_input_shape

        return own_input_shape(dataset, seed)
    return INPUT_SHAPES.get(dataset or "")


def synthetic_dataset(cfg: TrainConfig, input_shape: tuple[int, ...]) -> Dataset:
    """Seeded random inputs; labels from a fixed random linear map, so they are learnable."""
    g = torch.Generator().manual_seed(mix_seed(cfg.seed, 7919))
    n, n_test = cfg.synthetic_size, max(cfg.synthetic_size // 4, 1)
    x = torch.randn((n + n_test, *input_shape), generator=g)
    proj = torch.randn((int(np.prod(input_shape)), cfg.num_classes), generator=g)
    y = (x.flatten(1) @ proj).argmax(1)
    return Dataset("synthetic", x[:n], y[:n], x[n:], y[n:], None, None, False, "synthetic data")


def _data_flag(cfg: TrainConfig) -> str:
    return "--data-dir" if cfg.data_dir else "STALESIM_DATA"


def _load_idx(cfg: TrainConfig) -> Dataset:
    """MNIST / Fashion-MNIST through a verified cache (see :mod:`stalesim.runtime.datafiles`)."""
    from stalesim.runtime import datafiles as df

    name = df.TV_NAME[cfg.dataset]
    cls = df.tv_class(cfg.dataset)
    cache = cache_dir()
    root = data_root(cfg)
    if root is not None:
        try:
            df.prepare_idx(cfg.dataset, root, cache)
        except StalesimError as exc:
            raise StalesimError(f"{exc} (from {_data_flag(cfg)})") from None
        train, test = _tv_idx(cls, cache, cfg.dataset)
    elif df.prepare_idx(cfg.dataset, None, cache):
        train, test = _tv_idx(cls, cache, cfg.dataset)
    else:
        train, test = _download(cls, cache, [str(cache / name / "raw")], cfg.dataset)
        df.verify_cache(cfg.dataset, cache)
    mean, std = _STATS[cfg.dataset]
    return Dataset(cfg.dataset, train.data.unsqueeze(1).contiguous(), train.targets.long(),
                   test.data.unsqueeze(1).contiguous(), test.targets.long(), mean, std, False,
                   f"{name} (torchvision raw files)")


def _tv_idx(cls: Callable[..., Any], cache: Path, dataset: str) -> tuple[Any, Any]:
    """torchvision's reader on the verified unpacked files (``cls``: its MNIST-like dataset class;
    the (train, test) datasets are untyped: their ``data`` and ``targets`` are read)."""
    try:
        return cls(str(cache), train=True, download=False), cls(str(cache), train=False, download=False)
    except (RuntimeError, OSError, ValueError, AssertionError) as exc:  # verified files: not expected
        raise StalesimError(f"dataset: {dataset}: cannot read the files in {cache} "
                            f"({type(exc).__name__})") from None


def _download(cls: Callable[..., Any], cache: Path, looked: list[str], dataset: str) -> tuple[Any, Any]:
    """torchvision's download into the cache (10 s socket timeout; torchvision checks the
    archives' MD5s); ``STALESIM_NO_DOWNLOAD=1`` skips it (offline machines, tests)."""
    from stalesim.runtime.datafiles import env_flag

    if env_flag("STALESIM_NO_DOWNLOAD"):
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


def _load_cifar(cfg: TrainConfig) -> Dataset:
    """CIFAR-10 from ``.npz`` arrays or torchvision's batches: in the given data folder only
    (no fallback), else in the cache, else downloaded (see :mod:`stalesim.runtime.datafiles`)."""
    from stalesim.runtime import datafiles as df

    mean, std = _STATS["cifar10"]
    looked: list[str] = []
    root = data_root(cfg)
    cands = [cache_dir()] if root is None else [root, root / "CIFAR10", root / "cifar10"]
    for d in cands:
        looked.append(str(d))
        pair = df.npz_pair(d)
        if pair is not None:
            (xtr, ytr), (xte, yte) = df.load_cifar_npz(pair[0]), df.load_cifar_npz(pair[1])
            notes = d / "NOTES.md"
            jpeg = notes.is_file() and "jpeg" in notes.read_text(errors="ignore").lower()
            note = JPEG_NOTE if jpeg else f"CIFAR-10 from .npz arrays in {d}"
            return Dataset("cifar10", _nhwc(xtr), torch.as_tensor(ytr).long(),
                           _nhwc(xte), torch.as_tensor(yte).long(), mean, std, cfg.augment, note)
        if (d / "cifar-10-batches-py").is_dir():
            train, test = df.cifar_batches(d)
            return Dataset("cifar10", _nhwc(train.data), torch.as_tensor(train.targets).long(),
                           _nhwc(test.data), torch.as_tensor(test.targets).long(), mean, std,
                           cfg.augment, "CIFAR-10 (torchvision)")
    if root is not None:
        raise StalesimError(f"dataset: cifar10 not found (looked in {', '.join(looked)}; expected "
                            f"cifar10_train.npz + cifar10_test.npz or cifar-10-batches-py; "
                            f"from {_data_flag(cfg)})")
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

    def test_batches(self, batch_size: int = 1000) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Test set in order, normalized, no augmentation."""
        test_x, test_y = self.data.test_x, self.data.test_y
        if test_x is None or test_y is None:
            return
        n = test_x.shape[0]
        for a in range(0, n, batch_size):
            yield (self.data.prepare(test_x[a:a + batch_size], self.cfg.torch_dtype),
                   test_y[a:a + batch_size])


def batch_stream(cfg: TrainConfig, data: Dataset | None = None,
                 input_shape: tuple[int, ...] | None = None) -> BatchStream:
    """The run's deterministic batch order (loads the dataset unless given).

    Language-model runs get a :class:`stalesim.runtime.text.TextStream` (same
    interface: ``stream(t)``, ``batches_per_epoch``, ``data.note``, ``test_batches``)
    whose windows are ``input_shape[0]`` (the model's block size) characters long.
    """
    from stalesim.runtime.tasks import task_of

    if task_of(cfg) == "lm":
        from stalesim.runtime.text import text_stream

        if input_shape is not None:
            block = int(input_shape[0])
        else:
            from stalesim.workloads.gpt import parse_gpt_name

            block = parse_gpt_name(cfg.model).block_size
        return text_stream(cfg, block, data)  # type: ignore[return-value,arg-type]
    return BatchStream(cfg, data if data is not None else load_dataset(cfg, input_shape))


def shard(x: torch.Tensor, parts: int, index: int) -> torch.Tensor:
    """Equal part ``index`` of ``parts`` along the batch dimension (worker or micro-batch)."""
    n = x.shape[0] // parts
    return x[index * n:(index + 1) * n]


BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor]]
