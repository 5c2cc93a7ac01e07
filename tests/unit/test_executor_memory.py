"""stalesim.executor.memory.MemorySampler: what it counts of a rank's buffers, and the peak it keeps
(the whole rank's count against an independent one is in test_runtime_memory.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from stalesim.executor.memory import MemorySampler, storage_of


def _sampler(**kw) -> tuple[MemorySampler, SimpleNamespace, dict, dict]:
    store = SimpleNamespace(inputs={}, grads_in={}, outputs={}, grads_out={})
    sends: dict = {}
    ars: dict = {}
    m = MemorySampler({}, store=store, sends=sends, allreduces=ars, local_loss=False, momentum=False, **kw)
    return m, store, sends, ars


def test_buffers_are_counted_once_by_storage() -> None:
    m, store, sends, ars = _sampler()
    buf = torch.zeros(10)  # 40 bytes
    m.posted(("F", 0, 1, 0, None), buf)
    assert m.now() == 40
    m.consumed(("F", 0, 1, 0, None))
    assert m.now() == 0
    g = torch.zeros(5)  # an input gradient awaiting SEND_B, and the same storage sent
    store.grads_out[(0, 1, 0, None)] = g
    sends[1] = SimpleNamespace(counted=True, storage=storage_of(g)[0], nbytes=20)
    sends[2] = SimpleNamespace(counted=False, storage=1, nbytes=999)  # labels: not counted
    ars[(0, 0, 0)] = (None, [], torch.zeros(3, dtype=torch.float64))  # 24 bytes
    parts: dict[str, int] = {}
    assert m.now(parts) == 20 + 24
    assert parts == {"static": 0, "stash": 0, "gradients": 0, "activations": 0, "deferred_w": 0,
                     "comm_buffers": 44}


def test_the_peak_and_its_parts_are_kept_and_cuda_is_not_sampled() -> None:
    m, *_ = _sampler()
    m.posted(("B", 0, 0, 0, None), torch.zeros(4))
    m.track()
    m.consumed(("B", 0, 0, 0, None))
    m.track()
    assert m.peak_bytes == 16 and m.peak_parts is not None and m.peak_parts["comm_buffers"] == 16
    off, *_ = _sampler(enabled=False)
    off.posted(("B", 0, 0, 0, None), torch.zeros(4))
    off.track()
    assert off.peak_bytes == 0 and off.peak_parts == {}
