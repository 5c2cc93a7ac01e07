"""Finding, verifying and unpacking dataset files (what :mod:`stalesim.runtime.data` reads).

Rules (each one closes a way a run could silently train on the wrong bytes):

- **A given data folder is the only source.** With ``--data-dir`` or
  ``$STALESIM_DATA`` set, a data set that is missing there, or corrupt,
  truncated or empty, is a one-line :class:`StalesimError` naming the file;
  there is no silent fallback to the cache or to a download.
- **Nothing unverified enters the cache.** MNIST and Fashion-MNIST ``.gz``
  files must match torchvision's own MD5s (``cls.resources``) before they are
  unpacked; the unpacked IDX files must match the MD5s below (computed from
  those verified archives), checked while they are written, and each file
  appears in the cache atomically (:mod:`stalesim.atomic`). Already unpacked
  IDX files in a data folder are accepted only with the unpacked MD5.
- **The cache is checked on every use.** A cached IDX file whose MD5 is wrong
  (a poisoned cache from an older version, a torn copy) is unpacked again from
  the given folder, or removed and downloaded again (torchvision's download
  verifies the archive's MD5), never used.
- **CIFAR-10** here is an ``.npz`` copy (``x`` uint8 [N, 32, 32, 3], ``y``
  labels 0..9) with no published checksum: it is loaded with
  ``allow_pickle=False`` and its shapes, dtypes and label range are checked. The
  official ``cifar-10-batches-py`` layout is checked by torchvision (MD5 of
  every batch file) before it is unpickled.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stalesim.atomic import atomic_open, ensure_dir
from stalesim.errors import StalesimError

TV_NAME = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}

# MD5 of the *unpacked* IDX files, from the archives whose MD5 torchvision lists.
RAW_MD5 = {
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}
CHUNK = 1 << 20


@dataclass(frozen=True)
class IdxFile:
    """One IDX file of MNIST-like data: its unpacked name and both MD5s."""

    name: str  # e.g. train-images-idx3-ubyte
    gz_md5: str
    raw_md5: str


def tv_class(dataset: str) -> Any:
    from torchvision import datasets

    return datasets.MNIST if dataset == "mnist" else datasets.FashionMNIST


def idx_files(dataset: str) -> list[IdxFile]:
    """The four files of ``dataset`` with torchvision's archive MD5s."""
    raw = RAW_MD5[dataset]
    out = []
    for gz_name, md5 in tv_class(dataset).resources:
        name = gz_name[:-3] if gz_name.endswith(".gz") else gz_name
        out.append(IdxFile(name, md5, raw[name]))
    return out


def md5_of(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                h.update(chunk)
    except OSError as exc:
        raise StalesimError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return h.hexdigest()


def cached_ok(path: Path, md5: str) -> bool:
    """``path`` is a regular file (not a link) with this MD5."""
    return path.is_file() and not path.is_symlink() and md5_of(path) == md5


def _gunzip_verified(gz: Path, out: Path, f: IdxFile, dataset: str) -> None:
    """Unpack ``gz`` into ``out`` atomically, checking the unpacked MD5 as it is written."""
    h = hashlib.md5(usedforsecurity=False)
    with atomic_open(out, "wb") as dst:
        try:
            with gzip.open(gz, "rb") as src:
                while True:
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
                    dst.write(chunk)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise StalesimError(f"{gz}: not a valid gzip file ({type(exc).__name__})") from None
        if h.hexdigest() != f.raw_md5:
            raise StalesimError(f"{gz}: unpacks to data whose MD5 {h.hexdigest()} is not the {dataset} "
                                f"file {f.name} ({f.raw_md5})")


def _copy_verified(src: Path, out: Path) -> None:
    with atomic_open(out, "wb") as dst:
        try:
            fh = open(src, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise StalesimError(f"{src}: cannot read ({exc.strerror or exc})") from None
        with fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                dst.write(chunk)


def _from_folder(f: IdxFile, src: Path, dst: Path, dataset: str) -> None:
    """Check the given folder's file first, even when the cache already holds a
    verified copy: a corrupt or truncated file in ``--data-dir`` is an error, not
    silently masked by an earlier good run (the folder is the only source)."""
    out = dst / f.name
    gz, plain = src / f"{f.name}.gz", src / f.name
    if gz.is_file():
        got = md5_of(gz)
        if got != f.gz_md5:
            size = gz.stat().st_size
            raise StalesimError(
                f"{gz}: MD5 {got} does not match torchvision's {f.gz_md5} ({size} bytes: "
                f"corrupt, truncated or not the {dataset} file)")
        if not cached_ok(out, f.raw_md5):
            _gunzip_verified(gz, out, f, dataset)
    elif plain.is_file():
        got = md5_of(plain)
        if got != f.raw_md5:
            raise StalesimError(f"{plain}: MD5 {got} is not the {dataset} file's ({f.raw_md5}): "
                                "corrupt, truncated or not the right file")
        if not cached_ok(out, f.raw_md5):
            _copy_verified(plain, out)
    else:
        raise StalesimError(f"{gz}: missing (the {dataset} data set needs it, or its unpacked "
                            f"{f.name}, in {src})")


def prepare_idx(dataset: str, root: Path | None, cache: Path) -> bool:
    """Make ``cache/<Name>/raw`` hold the four verified IDX files.

    With a data folder ``root``: from ``root/<Name>/raw`` or a one-line error.
    Without: True if the cache is already complete and verified; otherwise the bad
    cached files are removed and False is returned (the caller downloads).
    """
    name = TV_NAME[dataset]
    dst = cache / name / "raw"
    files = idx_files(dataset)
    if root is not None:
        src = root / name / "raw"
        if not src.is_dir():
            raise StalesimError(f"dataset: {dataset} not found (looked in {src})")
        ensure_dir(dst)
        for f in files:
            _from_folder(f, src, dst, dataset)
        return True
    complete = True
    for f in files:
        out = dst / f.name
        if cached_ok(out, f.raw_md5):
            continue
        complete = False
        if out.is_symlink() or out.is_file():
            try:
                out.unlink()  # our own cache: a bad file must not satisfy torchvision's check
            except OSError as exc:
                raise StalesimError(f"{out}: corrupt cache file that cannot be removed "
                                    f"({exc.strerror or exc})") from None
    return complete


def verify_cache(dataset: str, cache: Path) -> None:
    """After a download: every unpacked file must have its MD5."""
    dst = cache / TV_NAME[dataset] / "raw"
    for f in idx_files(dataset):
        if not cached_ok(dst / f.name, f.raw_md5):
            raise StalesimError(f"{dst / f.name}: downloaded file does not have the {dataset} MD5 "
                                f"{f.raw_md5}")


# ------------------------------------------------------------------ CIFAR-10
def npz_pair(d: Path) -> tuple[Path, Path] | None:
    for tr, te in (("cifar10_train.npz", "cifar10_test.npz"), ("train.npz", "test.npz")):
        if (d / tr).is_file() and (d / te).is_file():
            return d / tr, d / te
    return None


def load_cifar_npz(path: Path, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``x`` uint8 [N, 32, 32, 3] and ``y`` integer [N] in 0..num_classes-1, or a one-line error."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if "x" not in z.files or "y" not in z.files:
                raise StalesimError(f"{path}: expected arrays 'x' and 'y', found {sorted(z.files)}")
            x, y = z["x"], z["y"]
    except StalesimError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as exc:
        raise StalesimError(f"{path}: not a readable .npz file ({type(exc).__name__})") from None
    if x.dtype != np.uint8 or x.ndim != 4 or tuple(x.shape[1:]) != (32, 32, 3) or x.shape[0] == 0:
        raise StalesimError(f"{path}: x must be uint8 [N, 32, 32, 3] with N >= 1, got "
                            f"{x.dtype} {list(x.shape)}")
    if not np.issubdtype(y.dtype, np.integer) or y.shape != (x.shape[0],):
        raise StalesimError(f"{path}: y must be integer labels [{x.shape[0]}], got {y.dtype} {list(y.shape)}")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise StalesimError(f"{path}: labels must be in 0..{num_classes - 1}, found {lo}..{hi}")
    return x, y


def cifar_batches(d: Path) -> tuple[Any, Any]:
    """torchvision's CIFAR10 from ``d/cifar-10-batches-py`` (it checks every file's MD5 first)."""
    from torchvision import datasets

    try:
        return (datasets.CIFAR10(str(d), train=True, download=False),
                datasets.CIFAR10(str(d), train=False, download=False))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StalesimError(f"{d / 'cifar-10-batches-py'}: {first}") from None


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
