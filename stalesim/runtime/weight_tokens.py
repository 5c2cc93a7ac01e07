"""The saved-tensor hooks that let one set of live parameters serve every weight version.

A forward under :meth:`WeightTokens.packing` saves, instead of each tensor that shares
storage with a stage weight, a token ``(param index, size, stride, storage offset)``; a
backward under :meth:`WeightTokens.reading` turns each token back into a view of the
version it reads (the live tensor or a stashed copy). See :mod:`stalesim.runtime.stage` for
the whole mechanism. Kept apart from the runtime because this state (which weights a forward
reads, which a backward reads) lives only while one forward or backward runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from stalesim.runtime.mitigations import Mitigations
from stalesim.schedule import Schedule
from stalesim.schedule.liveness import updates_during_backward_wait

_TOKEN = "stalesim-param"


def storage_ptr(t: torch.Tensor) -> int | None:
    """``t``'s storage address, or None for a tensor without one (or an empty storage)."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return ptr or None


def ptr_map(tensors: Sequence[torch.Tensor]) -> dict[int, int]:
    """Storage address -> index, for the tensors that have a storage."""
    out: dict[int, int] = {}
    for i, t in enumerate(tensors):
        ptr = storage_ptr(t)
        if ptr is not None:
            out[ptr] = i
    return out


def hooks_needed(mit: Mitigations, schedule: Schedule, stage: int, worker: int) -> bool:
    """True when some update of this stage runs while one of its forwards awaits its
    backward (a schedule fact, :func:`updates_during_backward_wait`), or a mitigation
    changes the weights a forward or backward reads."""
    if mit.changes_forward or mit.changes_backward:
        return True
    return updates_during_backward_wait(schedule, stage, worker)


class WeightTokens:
    """Pack and unpack hooks for the stage weights ``params`` (the live parameters)."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.params = params
        self.param_ptrs: dict[int, int] = ptr_map(params)  # storage address -> parameter index
        # set while a forward or backward runs
        self._pack_ptr = self.param_ptrs
        self._leaves: Sequence[torch.Tensor] = params
        self._seen: dict[int, int] | None = None  # saved storages counted by pack
        self._read: Sequence[torch.Tensor] | None = None

    @contextmanager
    def packing(self, leaves: Sequence[torch.Tensor] | None, seen: dict[int, int]) -> Iterator[None]:
        """While a forward reads ``leaves`` (None: the live parameters): tokens for them,
        and every other saved storage recorded in ``seen`` (key -> bytes)."""
        self._leaves = leaves if leaves is not None else self.params
        self._pack_ptr = self.param_ptrs if leaves is None else ptr_map(leaves)
        self._seen = seen
        try:
            yield
        finally:
            self._pack_ptr = self.param_ptrs
            self._seen = None

    @contextmanager
    def reading(self, weights: Sequence[torch.Tensor] | None) -> Iterator[None]:
        """While a backward reads ``weights``: the tensors its tokens unpack to."""
        self._read = weights
        try:
            yield
        finally:
            self._read = None

    def pack(self, t: torch.Tensor) -> Any:
        ptr = storage_ptr(t)
        i = self._pack_ptr.get(ptr) if ptr is not None else None
        if i is None:
            if self._seen is not None and ptr is not None:
                self._seen[ptr] = t.untyped_storage().nbytes()
            return t
        base = self.params[i] if self._pack_ptr is self.param_ptrs else self._leaves[i]
        return (_TOKEN, i, tuple(t.size()), tuple(t.stride()), t.storage_offset() - base.storage_offset())

    def unpack(self, obj: Any) -> torch.Tensor:
        if isinstance(obj, tuple) and len(obj) == 5 and obj[0] == _TOKEN:
            _, i, size, stride, off = obj
            if self._read is None:
                raise RuntimeError("stalesim: saved weight unpacked outside a stage backward")
            w = self._read[i]
            return w.as_strided(size, stride, w.storage_offset() + off)
        return obj
