"""The data-parallel gradient all-reduce, defined once for the emulator and the executor.

Each worker compresses its batch-t gradient buffer (Pipe-SGD's lossy wire
format, :func:`~stalesim.runtime.mitigations.compress`) into one flat bucket;
the buckets are summed across workers (in process by the emulator, by
``torch.distributed.all_reduce`` in the executor) and every worker's buffer is
replaced by the sum divided by the number of workers. Both consumers call
:func:`pack` and :func:`unpack_mean`, so their arithmetic is the same.
"""

from __future__ import annotations

import torch

from stalesim.runtime.mitigations import compress


def pack(grads: list[torch.Tensor], mode: str, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One flat bucket of the compressed (then decompressed) gradients, in buffer order."""
    if not grads:
        return torch.zeros(0, dtype=dtype, device=device)
    return torch.cat([compress(g, mode).reshape(-1) for g in grads])


def unpack_mean(total: torch.Tensor, grads: list[torch.Tensor], workers: int) -> None:
    """Divide the summed bucket by ``workers`` (in place) and copy it back into ``grads``."""
    total.div_(workers)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(total[offset:offset + n].view_as(g))
        offset += n


def mean_in_process(buffers: list[list[torch.Tensor]], mode: str) -> None:
    """The emulator's all-reduce: every worker's buffer becomes the mean over workers."""
    if not buffers or not buffers[0]:
        return
    ref = buffers[0][0]
    with torch.no_grad():
        flats = [pack(b, mode, dtype=ref.dtype, device=ref.device) for b in buffers]
        total = flats[0].clone()
        for f in flats[1:]:
            total.add_(f)
        for b in buffers:
            unpack_mean(total.clone(), b, len(buffers))
