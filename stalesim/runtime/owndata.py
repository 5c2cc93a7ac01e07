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
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from stalesim.errors import StalesimError
from stalesim.plugins import call_factory, first_line

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
        n = _user_call(lambda: len(ds), spec, f"len() of the {part} set")  # len() refuses a negative one
        if n > MAX_ITEMS:
            raise StalesimError(f"{FLAG}: {spec}: the {part} set has {n:,} items, more than this tool "
                                f"holds in memory item by item ({MAX_ITEMS:,}); return a TensorDataset")
        xs, ys = [], []
        for i in range(n):
            item = _user_call(lambda: ds[i], spec, f"{part} item {i}")  # noqa: B023 - called at once
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise StalesimError(f"{FLAG}: {spec}: {part} item {i} is {type(item).__name__}, "
                                    "expected an (x, y) pair")
            xs.append(_item_tensor(item[0], spec, f"{part} item {i}'s input"))
            ys.append(_item_tensor(item[1], spec, f"{part} item {i}'s label"))
        if not xs:
            raise StalesimError(f"{FLAG}: {spec}: the {part} set is empty")
        x, y = _stack(xs, spec, f"{part} inputs"), _stack(ys, spec, f"{part} labels")
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
    if y.dtype == torch.bool:
        raise StalesimError(f"{FLAG}: {spec}: {part} labels must be integer classes, got torch.bool "
                            "(give y.long() for two classes)")
    if int(y.min()) < 0:
        raise StalesimError(f"{FLAG}: {spec}: {part} labels must be classes >= 0, got {int(y.min())}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        i = int((~torch.isfinite(x)).reshape(x.shape[0], -1).any(1).nonzero()[0, 0])
        raise StalesimError(f"{FLAG}: {spec}: {part} input {i} holds NaN or infinity (every loss of a "
                            "batch holding it would be NaN)")
    return x.contiguous(), y.long()


def _user_call(read: Callable[[], Any], spec: str, what: str) -> Any:
    """``read()``, a call into the user's data set (``len``, ``__getitem__``): what it raises, and a
    ``sys.exit()`` in it, is one line naming the factory and the item, not a traceback from here."""
    from stalesim.plugins import brief_code, debug_traceback

    try:
        return read()
    except StalesimError:
        raise
    except SystemExit as exc:
        debug_traceback(exc)
        raise StalesimError(f"{FLAG}: {spec}: reading {what} called sys.exit({brief_code(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - the user's data set failed: say where, in one line
        debug_traceback(exc)
        raise StalesimError(f"{FLAG}: {spec}: reading {what} raised {type(exc).__name__}: "
                            f"{first_line(exc)}") from None


def _stack(items: list[torch.Tensor], spec: str, what: str) -> torch.Tensor:
    try:
        return torch.stack(items)
    except RuntimeError:
        raise StalesimError(f"{FLAG}: {spec}: {what} differ in shape or type (first {tuple(items[0].shape)} "
                            f"{items[0].dtype}); every sample must have one") from None


def _item_tensor(value: Any, spec: str, what: str) -> torch.Tensor:
    """One input or label of an item as a tensor (a tensor, an array, a number or nested lists of
    numbers); anything else (a string, None, a dict) is one line naming it."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (str, bytes)) or value is None:
        raise StalesimError(f"{FLAG}: {spec}: {what} is {type(value).__name__}, expected a tensor or numbers")
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise StalesimError(f"{FLAG}: {spec}: {what} is {type(value).__name__}, expected a tensor or numbers "
                            f"({first_line(exc)})") from None
