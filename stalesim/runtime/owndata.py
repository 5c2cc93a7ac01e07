"""Your own data set: ``--dataset pkg.module:factory`` -> the in-memory :class:`Dataset`.

The factory is called with no arguments and returns ``(train, test)`` (``test`` may be
None: no test accuracy) or ``train`` alone, each a map-style ``torch.utils.data.Dataset``
whose items are ``(x, y)`` pairs, as torchvision's are: ``x`` a tensor of the per-sample
input shape, already normalised (float; ``uint8`` is scaled to [0, 1]), ``y`` an integer
class label. A ``TensorDataset`` is used without copying; any other data set is read
item by item once and held in memory, as the built-in data sets are. stalesim never
augments or re-normalises it.

The factory runs under ``torch.manual_seed(seed)`` inside a forked RNG, so random data
it draws is the same in every process that loads it (the emulator, the executor's data
ranks). One load per process and spec (cached), so asking for the input shape first and
loading the batches later reads the files once.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch

from stalesim.errors import StalesimError
from stalesim.plugins import call_factory

FLAG = "--dataset"
# items read one by one from a generic (non-tensor) data set: a bound, so a factory that
# returns a streaming or endless data set is refused instead of read forever
MAX_ITEMS = 10_000_000


class OwnData(NamedTuple):
    """A user's data set as tensors (:mod:`stalesim.runtime.data` wraps it as its ``Dataset``)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor | None
    test_y: torch.Tensor | None

    @property
    def train_size(self) -> int:
        return int(self.train_x.shape[0])


@functools.lru_cache(maxsize=4)
def load_own_dataset(spec: str, seed: int = 0) -> OwnData:
    """The tensors of the data set ``spec``'s factory returns (module doc), checked."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        got = call_factory(spec, FLAG)
    return as_dataset(got, spec)


def as_dataset(got: Any, spec: str) -> OwnData:
    """A factory's result (``(train, test)`` or ``train``, see the module doc) as checked tensors."""
    if isinstance(got, tuple) and len(got) == 2:
        train, test = got
    else:
        train, test = got, None
    train_x, train_y = _tensors(train, spec, "train")
    test_x = test_y = None
    if test is not None:
        test_x, test_y = _tensors(test, spec, "test")
        if test_x.shape[1:] != train_x.shape[1:]:
            raise StalesimError(f"{FLAG}: {spec}: test inputs are {tuple(test_x.shape[1:])}, "
                                f"train inputs {tuple(train_x.shape[1:])}")
    return OwnData(train_x, train_y, test_x, test_y)


def own_input_shape(spec: str, seed: int = 0) -> tuple[int, ...]:
    """Per-sample input shape of the user's data set (loads it once: cached)."""
    return tuple(int(d) for d in load_own_dataset(spec, seed).train_x.shape[1:])


def _tensors(ds: Any, spec: str, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, int64 labels) of one part, checked."""
    from torch.utils.data import Dataset as TorchDataset
    from torch.utils.data import TensorDataset

    if isinstance(ds, TensorDataset) and len(ds.tensors) == 2:
        x, y = ds.tensors
    elif isinstance(ds, torch.nn.Module):  # indexable too (a Sequential), but a model: say so
        raise StalesimError(f"{FLAG}: {spec}() returned {type(ds).__name__}, a model, for the {part} set; "
                            "expected a torch Dataset of (x, y) pairs (e.g. TensorDataset)")
    elif isinstance(ds, TorchDataset) or (hasattr(ds, "__getitem__") and hasattr(ds, "__len__")):
        try:
            n = len(ds)
        except TypeError:
            raise StalesimError(f"{FLAG}: {spec}: the {part} set has no length (an iterable data set); "
                                "return a map-style data set such as TensorDataset") from None
        if n > MAX_ITEMS:
            raise StalesimError(f"{FLAG}: {spec}: the {part} set has {n:,} items, more than this tool "
                                f"holds in memory item by item ({MAX_ITEMS:,}); return a TensorDataset")
        xs, ys = [], []
        for i in range(n):
            item = ds[i]
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise StalesimError(f"{FLAG}: {spec}: {part} item {i} is {type(item).__name__}, "
                                    "expected an (x, y) pair")
            xs.append(torch.as_tensor(item[0]))
            ys.append(torch.as_tensor(item[1]))
        if not xs:
            raise StalesimError(f"{FLAG}: {spec}: the {part} set is empty")
        try:
            x, y = torch.stack(xs), torch.stack(ys)
        except RuntimeError:
            raise StalesimError(f"{FLAG}: {spec}: {part} inputs differ in shape (first "
                                f"{tuple(xs[0].shape)}); every sample must have one shape") from None
    else:
        raise StalesimError(f"{FLAG}: {spec}() returned {type(ds).__name__} for the {part} set; expected "
                            "a torch Dataset of (x, y) pairs (e.g. TensorDataset), or a (train, test) pair")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise StalesimError(f"{FLAG}: {spec}: {part} inputs and labels must be tensors")
    if x.shape[0] == 0 or x.shape[0] != y.shape[0]:
        raise StalesimError(f"{FLAG}: {spec}: the {part} set has {x.shape[0]} inputs and {y.shape[0]} labels")
    if x.dim() < 2:
        raise StalesimError(f"{FLAG}: {spec}: {part} inputs must have a per-sample shape (got one number "
                            "per sample; give them shape (N, features))")
    if not (x.is_floating_point() or x.dtype == torch.uint8):
        raise StalesimError(f"{FLAG}: {spec}: {part} inputs must be float (or uint8 images), got {x.dtype}")
    if y.is_floating_point() or y.is_complex() or y.dim() != 1:
        raise StalesimError(f"{FLAG}: {spec}: {part} labels must be one integer class per sample, got "
                            f"{y.dtype} of shape {tuple(y.shape)}")
    if int(y.min()) < 0:
        raise StalesimError(f"{FLAG}: {spec}: {part} labels must be classes >= 0, got {int(y.min())}")
    return x.contiguous(), y.long()
