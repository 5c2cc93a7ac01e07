"""Memory accounting by unique storage: what a rank holds, counted as the memory model counts it.

Two tensors that share a storage (a view, a ``detach()``, the activation a stage
sends and the one its backward keeps) occupy its bytes once; a view of a large
storage holds the whole storage. So every count here is over *distinct
storages* (``untyped_storage().data_ptr()``), each ``untyped_storage().nbytes()``
bytes, never ``numel * element_size`` of the tensors.

The executor samples, after every compute action, the bytes of:

* static: parameters, buffers (BatchNorm statistics) and optimizer state
  (momentum, counted from the start);
* weight versions stashed for pending backwards, per-batch gradient buffers;
* every in-flight (micro-)batch of every stage: the stage input, its output and
  the tensors autograd saved for its backward (loss included on a loss stage),
  parameters excluded (:func:`saved_counter` is the saved-tensor hook that sees them);
* receive buffers posted or received and not yet consumed, sends not yet
  completed, all-reduce buckets in flight.

Labels (a few bytes per sample) and the transient tensors inside one action
(the gradients of intermediate activations during a backward) are not counted,
by the executor nor by the model (:mod:`stalesim.sim.memory`). On CUDA the
executor reports ``max_memory_allocated`` since the end of setup instead, which does
include them; the model adds them as measured terms per action kind and stage, and per
process (:func:`stalesim.runtime.memfacts.stage_cuda_memory_terms`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def storage_key(t: torch.Tensor) -> int:
    """Identity of a tensor's storage (its data pointer; 0 for an empty storage)."""
    return int(t.untyped_storage().data_ptr())


def storage_nbytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes())


def add_storage(seen: dict[int, int], t: torch.Tensor | None) -> None:
    """Record ``t``'s storage in ``seen`` (key -> bytes); empty storages are skipped."""
    if t is None:
        return
    st = t.untyped_storage()
    n = st.nbytes()
    if n:
        seen[int(st.data_ptr())] = int(n)


def unique_storage_bytes(tensors: Iterable[torch.Tensor | None],
                         exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages of ``tensors``, minus those of ``exclude``."""
    seen: dict[int, int] = {}
    for t in tensors:
        add_storage(seen, t)
    for t in exclude:
        seen.pop(storage_key(t), None)
    return sum(seen.values())


def saved_counter(skip: set[int], seen: dict[int, int]) -> tuple[Callable[[torch.Tensor], Any],
                                                                Callable[[Any], torch.Tensor]]:
    """(pack, unpack) hooks that record every saved tensor's storage in ``seen`` unless its
    key is in ``skip`` (parameters), and leave the tensors as they are."""
    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        k = int(st.data_ptr())
        if k not in skip and k:
            seen[k] = int(st.nbytes())
        return t

    return pack, _identity


def _identity(t: Any) -> Any:
    return t


def module_static_bytes(modules: Iterable[torch.nn.Module | None], *, momentum: bool) -> dict[str, int]:
    """Parameters, buffers and (SGD with momentum) one momentum buffer per parameter."""
    params: dict[int, int] = {}
    bufs: dict[int, int] = {}
    for m in modules:
        if m is None:
            continue
        for p in m.parameters():
            if p.requires_grad:
                add_storage(params, p)
        for b in m.buffers():
            add_storage(bufs, b)
    pb = sum(params.values())
    return {"params": pb, "buffers": sum(bufs.values()), "optimizer": pb if momentum else 0}
