"""Per-run scalars as ``[K]`` tensors broadcast against stacked parameters, uploaded once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch

from stalesim.runtime.devio import upload

#: per-run scalar tensors by (values, dtype, device): the hyper-parameters of a batch are
#: the same every step and the learning rates the same for every parameter of a step, so
#: each is uploaded once instead of once per parameter and use (bounded: learning-rate
#: schedules make new values every step)
_SCALARS: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_SCALARS_MAX = 512


def _cached(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The ``[K]`` tensor of ``values`` on ``device``, uploaded once (:func:`upload`: no host
    synchronisation on CUDA). Callers never modify it in place."""
    key = (values, dtype, device)
    t = _SCALARS.get(key)
    if t is None:
        t = _SCALARS[key] = upload(values, dtype, device)
        if len(_SCALARS) > _SCALARS_MAX:
            _SCALARS.popitem(last=False)
    else:
        _SCALARS.move_to_end(key)
    return t


def _floats(xs: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """Per-run Python floats as a ``[K]`` tensor of ``like``'s dtype and device (each value
    rounded once, as torch rounds a Python scalar operand)."""
    return _cached(tuple(float(x) for x in xs), like.dtype, like.device)


def _bc(v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A ``[K]`` vector shaped to broadcast against a stacked ``[K, ...]`` tensor."""
    return v.view((-1,) + (1,) * (p.dim() - 1))


def _mask(flags: Sequence[bool], p: torch.Tensor) -> torch.Tensor:
    return _cached(tuple(bool(f) for f in flags), torch.bool, p.device).view((-1,) + (1,) * (p.dim() - 1))


