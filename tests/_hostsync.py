"""Counting host reads of tensor values on the CPU (the CPU twin of CUDA's sync debug mode).

On a GPU, ``float(t)``, ``int(t)``, ``bool(t)``, ``t.item()``, ``t.tolist()``,
``t.cpu()`` and ``t.numpy()`` of a device tensor each wait for the device to finish
everything queued. ``torch.cuda.set_sync_debug_mode`` catches them only with CUDA;
on the CPU they cost nothing and nothing catches them. :func:`count_host_reads`
patches those methods of ``torch.Tensor`` and records every call made *from the
project's own code* (``stalesim/``): torch's internals are torch's
business (e.g. an optimizer's step counter lives on the CPU on purpose), and a
call the project makes is where a regression would come from.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OURS = (str(ROOT / "stalesim") + "/",)
READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


@contextmanager
def count_host_reads() -> Iterator[list[tuple[str, str, int]]]:
    """Yield a list that collects (method, file relative to the repo, line) per host read
    of a tensor value made by project code while the block runs."""
    calls: list[tuple[str, str, int]] = []
    saved = {name: torch.Tensor.__dict__.get(name) for name in READS}

    def wrap(name: str, orig):
        def method(self, *args, **kwargs):
            f = sys._getframe(1)
            path = f.f_code.co_filename
            if path.startswith(OURS):
                calls.append((name, str(Path(path).relative_to(ROOT)), f.f_lineno))
            return orig(self, *args, **kwargs)
        return method

    for name in READS:
        setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))
    try:
        yield calls
    finally:
        for name, orig in saved.items():
            if orig is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, orig)
