"""The bytes each in-flight record of a stage keeps alive, as :mod:`stalesim.runtime.memory`
counts them: its input, its output and the tensors autograd saved (parameters excluded).

A forward under the version hooks sees every saved storage as it packs it
(:class:`~stalesim.runtime.weight_tokens.WeightTokens`); a hook-free forward would pay for a
counting hook on every call, so :class:`SavedBytes` counts the first forward (and loss) of
each input shape and reuses that count, under a key no storage has. Kept apart from the
runtime because it is bookkeeping for the memory sampler only: no result depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from stalesim.runtime.memory import add_storage, saved_counter


def segment_storages(seen: dict[int, int], segments: Iterable[tuple[int, torch.Tensor]] | None) -> None:
    """Add the storages of the module outputs a split stage's record keeps for W."""
    for _, o in segments or ():
        st = o.untyped_storage()
        if st.nbytes():
            seen.setdefault(int(st.data_ptr()), int(st.nbytes()))


def record_storages(seen: dict[int, int], x: torch.Tensor, y: torch.Tensor,
                    segments: Iterable[tuple[int, torch.Tensor]] | None) -> dict[int, int]:
    """``seen`` (the storages a hooked forward saved) plus its input, output and kept module
    outputs: what its record keeps alive."""
    add_storage(seen, x)
    add_storage(seen, y)
    segment_storages(seen, segments)
    return seen


class SavedBytes:
    """Per-shape counts of what hook-free forwards and losses save, for one runtime.

    ``uid``: the start of this runtime's counted-not-seen keys, disjoint from those of the
    other runtimes of a rank (several stages share a device with virtual stages or fold: the
    accounting merges their dicts); ``param_ptrs``: the parameters' storages, never counted.
    """

    def __init__(self, uid: int, param_ptrs: dict[int, int]) -> None:
        self._uid = uid
        self._param_ptrs = param_ptrs
        self._cache: dict[tuple[Any, ...], int] = {}  # input shape -> saved bytes

    def next_uid(self) -> int:
        """A key no storage has (data pointers are >= 0): one per counted-not-seen entry."""
        self._uid -= 1
        return self._uid

    def plain_forward(self, call: Callable[[], torch.Tensor], x: torch.Tensor,
                      segments: list[tuple[int, torch.Tensor]] | None) -> tuple[torch.Tensor, dict[int, int]]:
        """Run a forward with no hooks (``call``), and its record's storages. The bytes
        autograd saves depend only on the input's shape and dtype: counted (with a counting
        hook) on the first forward of each."""
        key = (tuple(x.shape), x.dtype, x.requires_grad)
        extra = self._cache.get(key)
        if extra is None:
            seen: dict[int, int] = {}
            pack, unpack = saved_counter(set(self._param_ptrs), seen)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                y = call()
            io: dict[int, int] = {}
            add_storage(io, x)
            add_storage(io, y)
            # a split stage's record also keeps its modules' outputs (those autograd did not save)
            segment_storages(seen, segments)
            extra = self._cache[key] = sum(v for k, v in seen.items() if k not in io)
            io[self.next_uid()] = extra
            return y, io
        y = call()
        io = {}
        add_storage(io, x)
        add_storage(io, y)
        io[self.next_uid()] = extra
        return y, io

    def loss(self, compute: Callable[[], torch.Tensor], out: torch.Tensor, labels: torch.Tensor,
             storages: dict[int, int]) -> torch.Tensor:
        """Run ``compute`` (the loss of ``out``) and add the bytes it saves to ``storages``
        (a record's): counted once per shape, the record's own and the labels' excluded."""
        key = ("loss", tuple(out.shape), out.dtype)
        extra = self._cache.get(key)
        if extra is None:
            seen: dict[int, int] = {}
            skip = set(self._param_ptrs) | set(storages) | {int(labels.untyped_storage().data_ptr())}
            pack, unpack = saved_counter(skip, seen)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                loss = compute()
            extra = self._cache[key] = sum(seen.values())
        else:
            loss = compute()
        storages[self.next_uid()] = extra
        return loss
