"""Numbers between host and device without stalling the device.

On CUDA every read of a device value on the host (``float(t)``, ``int(t)``,
``t.item()``, ``t.tolist()``, ``if t:``) and every copy from pageable host memory
to the device (``torch.tensor(list, device=cuda)``, ``x.to(cuda)`` of an ordinary
CPU tensor) waits for the stream to drain: the host stops queueing kernels
until the device has caught up, and a pipeline of small kernels runs at the
speed of Python. The hot loops (emulator replay, executor ranks, the batched
optimizer) therefore

* copy inputs and per-run scalars through pinned memory with
  ``non_blocking=True`` (:func:`to_device`, :func:`upload`): the copy is queued
  on the stream like a kernel; the caching host allocator keeps the pinned block
  until the copy has run;
* keep values they must report (losses, correct counts) as device tensors and
  read them in one go where a number is really needed (:func:`read_values`,
  :class:`LossSums`).

On the CPU none of this changes a value: :func:`upload` builds the same tensor
``torch.tensor`` builds, :func:`to_device` is ``Tensor.to``, and the values read
are the same floats in the same order, so CPU results stay bit-identical.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import torch


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; a CPU tensor bound for CUDA goes through pinned memory
    asynchronously (a pageable copy would synchronise the stream)."""
    if device.type == "cuda" and t.device.type == "cpu":
        src = t if t.is_pinned() else t.pin_memory()
        return src.to(device, non_blocking=True)
    return t.to(device)


def upload(values: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Python numbers as a 1-d tensor on ``device`` (each rounded once to ``dtype``, as
    ``torch.tensor`` rounds them), without a host synchronisation on CUDA."""
    if device.type == "cuda":
        host = torch.tensor(list(values), dtype=dtype, pin_memory=True)
        return host.to(device, non_blocking=True)
    return torch.tensor(list(values), dtype=dtype, device=device)


def read_values(tensors: Sequence[torch.Tensor]) -> list[list[float] | list[int] | list[bool]]:
    """The values of many tensors with one device-to-host read per dtype: per tensor the
    flat list ``t.tolist()`` would give (``float(t)`` of a 0-dim tensor is entry 0)."""
    out: list[Any] = [None] * len(tensors)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    for idx in by_dtype.values():
        flat = torch.cat([tensors[i].detach().reshape(-1) for i in idx]).tolist() if idx else []
        pos = 0
        for i in idx:
            n = tensors[i].numel()
            out[i] = flat[pos:pos + n]
            pos += n
    return out


class LossSums(Mapping[Hashable, float]):
    """Per key, the sum of loss values added as device tensors, read lazily.

    :meth:`add` queues a detached 0-dim tensor (no read); reading any key reads every
    queued value at once and adds them in the order they were queued, starting from
    0.0 (the same Python float arithmetic as ``defaultdict(float)[key] += float(v)``).
    ``dict(sums)`` and :meth:`update` (checkpoints) see plain floats.
    """

    def __init__(self) -> None:
        self._sums: dict[Hashable, float] = {}
        self._queued: list[tuple[Hashable, torch.Tensor]] = []

    def add(self, key: Hashable, value: torch.Tensor) -> None:
        self._queued.append((key, value.detach()))

    def _read(self) -> None:
        if not self._queued:
            return
        vals = read_values([v for _, v in self._queued])
        for (key, _), v in zip(self._queued, vals):
            self._sums[key] = self._sums.get(key, 0.0) + v[0]
        self._queued = []

    def update(self, other: Mapping[Hashable, float]) -> None:
        self._read()
        self._sums.update(other)

    def __getitem__(self, key: Hashable) -> float:
        self._read()
        return self._sums[key]

    def __iter__(self) -> Iterator[Hashable]:
        self._read()
        return iter(self._sums)

    def __len__(self) -> int:
        self._read()
        return len(self._sums)
