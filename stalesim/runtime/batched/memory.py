"""What a batch of K runs needs in memory, estimated before it is built."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig


# ------------------------------------------------------------ memory estimate
def available_bytes(device: torch.device) -> int | None:
    """Memory free for tensors on ``device`` (CUDA: ``mem_get_info``; CPU: MemAvailable)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _saved_bytes(mod: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(bytes of the distinct non-parameter storages a forward of ``mod`` saves, plus its input
    and output; the output)."""
    params = {p.untyped_storage().data_ptr() for p in mod.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return t
        ptr = st.data_ptr()
        if ptr and ptr not in params:
            seen[ptr] = st.nbytes()
        return t

    xin = x.detach().requires_grad_(x.is_floating_point())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mod(xin)
    seen[-1] = y.numel() * y.element_size()
    seen[-2] = xin.numel() * xin.element_size()
    return sum(seen.values()), y.detach()


def saved_bytes_per_sample(stages: Sequence[nn.Module], example: torch.Tensor) -> list[int]:
    """Bytes a forward of each stage keeps for its backward (saved activations, distinct
    storages, parameters excluded, plus its input and output), per sample of ``example``."""
    out = []
    x = example
    n = max(int(example.shape[0]), 1)
    for mod in stages:
        total, x = _saved_bytes(mod, x)
        out.append(-(-total // n))
    return out


def estimate_batch_bytes(*, runs: int, stage_params: Sequence[int], act_per_sample: Sequence[int],
                         micro_batch: int, liveness: Sequence[Any], cfgs: Sequence[TrainConfig],
                         element_size: int, extra_state: Sequence[int] = ()) -> dict[str, int]:
    """Bytes the K runs of a batch hold at their peak (an upper estimate); ``extra_state``:
    per stage, optimizer state of one run that is not a multiple of its parameters (basis
    rotation's factors and bases).

    Per stage s (``liveness`` of :func:`stalesim.schedule.liveness.stage_liveness`,
    worker 0 x workers): weights x (live + versions kept + gradient buffers +
    optimizer state + error-feedback / PipeMare buffers + update temporaries + one
    predicted copy per in-flight forward when predicting) + activations in flight x
    micro-batch x saved bytes per sample; times K.
    """
    from stalesim.runtime.optim import state_copies

    copies_opt = max(state_copies(c) for c in cfgs)
    wp = any(c.weight_prediction for c in cfgs)
    pmc = any(c.pipemare_correction for c in cfgs)
    weights = acts = 0
    for lv in liveness:
        s = lv.stage
        n = stage_params[s] * element_size
        copies = (lv.versions_kept + lv.grad_buffers + copies_opt + (1 if pmc else 0) + 3
                  + (lv.max_in_flight if wp else 0))
        weights += n * copies + (extra_state[s] if extra_state else 0)
        acts += lv.max_in_flight * micro_batch * act_per_sample[s]
    return {"weights": runs * weights, "activations": runs * acts, "total": runs * (weights + acts)}


def check_fits(est: dict[str, int], device: torch.device, runs: int, *, fraction: float = 0.85) -> None:
    """One-line error when the estimate exceeds ``fraction`` of the free memory."""
    free = available_bytes(device)
    if free is None or est["total"] <= fraction * free:
        return
    gib = 1024**3
    raise StalesimError(
        f"batched: {runs} runs need about {est['total'] / gib:.1f} GiB on {device} (weights, optimizer "
        f"state and weight versions {est['weights'] / gib:.1f} GiB, activations in flight "
        f"{est['activations'] / gib:.1f} GiB) but {free / gib:.1f} GiB are free; "
        "use fewer runs per batch (--batch-runs)")
