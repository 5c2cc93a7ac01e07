"""Measure a model block by block: the numbers behind ``stalesim profile``.

One measured *round* is one real training step executed block by block, the
way a pipeline stage would run it, followed by one whole-model step (so that
interference on a shared machine hits both halves of ``sum_over_whole_ratio``):
each block's forward reads the (detached)
output of the block before it; the backwards run in reverse order, each fed
the input gradient the next block produced; then each block's SGD-momentum
update is timed on its own. The first ``warmup`` rounds are discarded; the
profile stores the median of the other ``repeats`` plus min/max/IQR.

The split backward of the zero-bubble schedules is measured in the same round,
on a second (untimed) forward of each block, exactly as a stage runtime runs
``I`` and ``W`` (:mod:`stalesim.runtime.stage`), on the block's own autograd graph
(:mod:`stalesim.workloads.graph_split`, found before the timing starts): the
input-gradient half asks autograd for the block input's gradient and keeps the
gradients where the parameters' part of the graph branches off; the
weight-gradient half restarts there and asks for the parameters only. Any
``nn.Module`` block works (tuple outputs, modules called twice or out of order,
parameters used outside their own module, unused parameters). The first block's
input needs no gradient: its ``I`` is empty and its ``W`` the whole backward,
as on a first pipeline stage.

Timing uses ``time.perf_counter`` with ``torch.set_num_threads(threads)`` on
CPU (by default :data:`RANK_THREADS`, the one thread each executor rank runs, so the
profile times the work the ranks will do; ``stalesim profile`` and ``stalesim.profile``
share this default) and CUDA events on a GPU: on the profiled GPU's current stream, with that GPU
the current device for the whole measurement (``torch.cuda.device``). An event
recorded without a stream goes to the *current* device's stream, so profiling
``cuda:1`` with ``cuda:0`` current would time an idle ``cuda:0``: the host's
launch gaps, not the layers.

The profile records the precision in force (:class:`~stalesim.workloads.profile.Precision`,
:func:`precision_in_force`: TF32 for convolutions and for matmuls, autocast) and,
per block, the share of its FLOPs in convolutions, so a roofline compares a
"float32" GPU profile with the peak its convolutions actually had (TF32 by
torch's default on CUDA). Bytes saved for backward are the unique
storages packed by ``torch.autograd.graph.saved_tensors_hooks`` during the
block's forward, parameters excluded (they are counted in ``param_bytes``).
FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` (forward, and the
backward separately). The whole model is also timed (forward + loss +
backward + update in one piece) so ``sum_over_whole_ratio`` shows how far the
per-block sum is from the real step (per-call overheads, cache effects).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from stalesim.errors import StalesimError
from stalesim.threads import DEFAULT_THREADS
from stalesim.workloads.blocksum import block_sum_warning
from stalesim.workloads.graph_split import GraphSplit
from stalesim.workloads.profile import (
    SCHEMA_VERSION,
    BatchPoint,
    LayerProfile,
    Precision,
    Profile,
)
from stalesim.workloads.zoo import LayeredModel, build_model

# Torch CPU threads of each executor rank (stalesim.threads, the one default of the executor, the
# API and the CLI): a profile is measured the same way. None (torch's current setting) remains
# available to callers who want their own.
RANK_THREADS = DEFAULT_THREADS

__all__ = ["parse_device", "parse_dtype", "precision_flags", "precision_in_force", "profile_model"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_device(text: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``cuda:i`` -> torch.device, checking that it exists."""
    t = str(text).strip().lower()
    if t == "cpu":
        return torch.device("cpu")
    if t == "cuda" or t.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise StalesimError(f"device: {text!r} requested but no CUDA device is visible")
        idx = 0 if t == "cuda" else t.split(":", 1)[1]
        try:
            i = int(idx)
        except ValueError:
            raise StalesimError(f"device: expected cpu, cuda or cuda:<index>, got {text!r}") from None
        if not 0 <= i < torch.cuda.device_count():
            raise StalesimError(
                f"device: {text!r} out of range ({torch.cuda.device_count()} CUDA devices)"
            )
        return torch.device("cuda", i)
    raise StalesimError(f"device: expected cpu, cuda or cuda:<index>, got {text!r}")


def parse_dtype(text: str) -> torch.dtype:
    try:
        return _DTYPES[str(text).strip().lower()]
    except KeyError:
        raise StalesimError(
            f"dtype: expected one of {', '.join(_DTYPES)}, got {text!r}"
        ) from None


def precision_flags() -> dict[str, Any]:
    """torch's process-wide float32 precision switches, as they are now (for the record)."""
    flags: dict[str, Any] = {
        "cudnn.enabled": bool(torch.backends.cudnn.enabled),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    for name, obj in (("cudnn.conv.fp32_precision", getattr(torch.backends.cudnn, "conv", None)),
                      ("cuda.matmul.fp32_precision", torch.backends.cuda.matmul)):
        value = getattr(obj, "fp32_precision", None) if obj is not None else None
        if isinstance(value, str):  # torch >= 2.9's per-backend switch ("ieee" | "tf32" | "none")
            flags[name] = value
    return flags


def precision_in_force(device: torch.device, dtype: torch.dtype,
                       flags: dict[str, Any] | None = None) -> Precision:
    """How float32 convolutions and matmuls run on ``device`` under ``flags`` (default: torch's now).

    TF32 exists on CUDA only (cuDNN convolutions, cuBLAS matmuls) and only for float32
    tensors; a matmul precision other than ``"highest"`` lets cuBLAS use TF32 too.
    """
    f = precision_flags() if flags is None else flags
    fp32_cuda = device.type == "cuda" and dtype == torch.float32
    conv = fp32_cuda and bool(f.get("cudnn.enabled", True)) and bool(f.get("cudnn.allow_tf32"))
    matmul = fp32_cuda and (bool(f.get("cuda.matmul.allow_tf32"))
                            or f.get("float32_matmul_precision", "highest") != "highest")
    autocast = None
    if torch.is_autocast_enabled(device.type):
        autocast = str(torch.get_autocast_dtype(device.type)).replace("torch.", "")
    return Precision(conv_tf32=conv, matmul_tf32=matmul, autocast=autocast)


def _on_device(device: torch.device) -> Any:
    """The context that makes ``device`` current while it is profiled (a no-op on CPU)."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    import contextlib

    return contextlib.nullcontext()


class _Timer:
    """Times callables; CUDA events on a GPU (resolved at :meth:`flush`), else perf_counter.

    The events are recorded on ``device``'s current stream (where that device's kernels
    run), never on whatever device happens to be current. ``cuda_api`` is ``torch.cuda``
    (a stand-in in tests)."""

    def __init__(self, device: torch.device, cuda_api: Any = None) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.api = cuda_api if cuda_api is not None else torch.cuda
        self.stream = self.api.current_stream(device) if self.cuda else None
        self._pending: list[tuple[list[float], Any, Any]] = []

    def time(self, sink: list[float], fn: Callable[[], Any]) -> Any:
        if self.cuda:
            start = self.api.Event(enable_timing=True)
            end = self.api.Event(enable_timing=True)
            start.record(self.stream)
            out = fn()
            end.record(self.stream)
            self._pending.append((sink, start, end))
            return out
        import time

        t0 = time.perf_counter()
        out = fn()
        sink.append(time.perf_counter() - t0)
        return out

    def flush(self) -> None:
        if self.cuda:
            self.api.synchronize(self.device)
            for sink, s, e in self._pending:
                sink.append(s.elapsed_time(e) / 1000.0)
            self._pending.clear()


def _stats(values: Sequence[float]) -> tuple[float, dict[str, float]]:
    vals = sorted(values)
    med = statistics.median(vals)
    if len(vals) >= 2:
        q = statistics.quantiles(vals, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = 0.0
    return med, {"min": vals[0], "max": vals[-1], "iqr": iqr}


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every prediction: (B, C) classes or (B, T, V) next tokens."""
    return F.cross_entropy(out.float().flatten(0, -2), target.flatten())


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def conv_flops(counter: Any) -> int:
    """FLOPs a ``FlopCounterMode`` counted in convolution ops (forward and backward kernels)."""
    ops = counter.get_flop_counts().get("Global", {})
    return int(sum(n for op, n in ops.items() if "conv" in str(op)))


def _static_pass(
    model: LayeredModel, x0: torch.Tensor, target: torch.Tensor
) -> tuple[list[int], list[int], list[int], list[int], list[float | None]]:
    """Saved bytes, output bytes, forward and backward FLOPs, and the conv share of the
    FLOPs per block (one untimed step)."""
    from stalesim.workloads.flops import flop_counter

    blocks = model.blocks
    saved, outb, fflops, bflops = [], [], [], []
    fconv: list[int] = []
    bconv: list[int] = []
    outs: list[torch.Tensor] = []
    xs = [x0]
    for i, block in enumerate(blocks):
        param_keys = {_storage_key(p) for p in block.parameters()}
        param_keys |= {_storage_key(b) for b in block.buffers()}
        storages: dict[int, int] = {}
        pack = partial(_note_saved, param_keys, storages)
        x = xs[i]
        counter = flop_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, _unpack), counter:
            y = block(x)
            outb.append(_nbytes(y))
            if i == len(blocks) - 1:
                y = _loss(y, target)
        fflops.append(int(counter.get_total_flops()))
        fconv.append(conv_flops(counter))
        saved.append(sum(storages.values()))
        outs.append(y)
        xs.append(y.detach().requires_grad_(True))
    for i in reversed(range(len(blocks))):
        counter = flop_counter()
        with counter:
            if i == len(blocks) - 1:
                outs[i].backward()
            else:
                outs[i].backward(xs[i + 1].grad)
        bflops.append(int(counter.get_total_flops()))
        bconv.append(conv_flops(counter))
    bflops.reverse()
    bconv.reverse()
    model.zero_grad(set_to_none=True)
    share = [(fc + bc) / (f + b) if f + b > 0 else None
             for fc, bc, f, b in zip(fconv, bconv, fflops, bflops)]
    return saved, outb, fflops, bflops, share


def _note_saved(param_keys: set[int], storages: dict[int, int], t: torch.Tensor) -> torch.Tensor:
    """saved_tensors_hooks pack: note the size of each storage autograd saves, parameters and
    buffers excluded (``param_bytes`` counts them)."""
    key = _storage_key(t)
    if key not in param_keys:
        storages[key] = t.untyped_storage().nbytes()
    return t


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _measure_batch(
    model: LayeredModel,
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
    warmup: int,
    seed: int,
) -> tuple[list[LayerProfile], float, dict[str, float]]:
    x0, target = model.random_batch(batch_size, torch.Generator().manual_seed(seed), dtype)
    x0, target = x0.to(device), target.to(device)  # float images or int64 token ids
    saved, outb, fflops, bflops, share = _static_pass(model, x0, target)
    opts = _block_optimizers(model)
    timer = _Timer(device)
    # the whole model in one piece, for sum_over_whole_ratio
    whole_opt = torch.optim.SGD(list(model.parameters()), lr=0.0, momentum=0.9)
    kept = _BlockTimes.empty(len(model.blocks))
    whole: list[float] = []
    # Each round = one block-by-block step, then one whole-model step, so that a
    # burst of interference on a shared machine hits both and the ratio stays honest.
    for r in range(warmup + repeats):
        times, whole_s = _round(model, x0, target, opts, whole_opt, timer)
        if r >= warmup:
            whole += whole_s
            kept.extend(times)
    model.zero_grad(set_to_none=True)
    layers = [_layer_profile(model, i, kept, saved[i], outb[i], fflops[i], bflops[i], share[i])
              for i in range(len(model.blocks))]
    w_med, w_sp = _stats(whole)
    return layers, w_med, w_sp


@dataclass
class _BlockTimes:
    """Timing samples per phase, one list per block (:class:`LayerProfile`'s field names)."""

    forward_s: list[list[float]]
    backward_s: list[list[float]]
    update_s: list[list[float]]
    backward_input_s: list[list[float]]
    backward_weight_s: list[list[float]]

    @classmethod
    def empty(cls, n: int) -> _BlockTimes:
        return cls(*(_per_block(n) for _ in fields(cls)))

    def extend(self, other: _BlockTimes) -> None:
        """Append ``other``'s samples block by block."""
        for f in fields(self):
            for mine, theirs in zip(getattr(self, f.name), getattr(other, f.name)):
                mine += theirs


def _per_block(n: int) -> list[list[float]]:
    """An empty sample list for each of ``n`` blocks."""
    return [[] for _ in range(n)]


def _block_optimizers(model: LayeredModel) -> list[torch.optim.Optimizer | None]:
    """Each block's own SGD-momentum optimizer (None: a block without trainable parameters)."""
    opts: list[torch.optim.Optimizer | None] = []
    for block in model.blocks:
        params = [p for p in block.parameters() if p.requires_grad]
        # lr=0 keeps the weights fixed across repeats while doing the full update arithmetic
        opts.append(torch.optim.SGD(params, lr=0.0, momentum=0.9) if params else None)
    return opts


def _round(model: LayeredModel, x0: torch.Tensor, target: torch.Tensor,
           opts: list[torch.optim.Optimizer | None], whole_opt: torch.optim.Optimizer,
           timer: _Timer) -> tuple[_BlockTimes, list[float]]:
    """One measured round: the block-by-block step, its split backward, then the whole model."""
    model.zero_grad(set_to_none=True)
    f_s, b_s, u_s, grads = _block_step(model, x0, target, opts, timer)
    i_s, w_s = _split_backward_round(model, x0, target, grads, timer)
    model.zero_grad(set_to_none=True)
    whole_s: list[float] = []
    timer.time(whole_s, partial(_whole_step, model, x0, target, whole_opt))
    timer.flush()
    return _BlockTimes(f_s, b_s, u_s, i_s, w_s), whole_s


def _block_step(model: LayeredModel, x0: torch.Tensor, target: torch.Tensor,
                opts: list[torch.optim.Optimizer | None], timer: _Timer
                ) -> tuple[list[list[float]], list[list[float]], list[list[float]], list[torch.Tensor | None]]:
    """One training step block by block, as a pipeline stage runs it: forward, update and
    backward seconds per block, and each block's output gradient (None for the last block,
    whose output is the loss) for the split backward."""
    blocks = model.blocks
    n = len(blocks)
    f_s = _per_block(n)
    b_s = _per_block(n)
    u_s = _per_block(n)
    xs = [x0]  # each block's input, detached from the block before it
    outs: list[torch.Tensor] = []
    for i, block in enumerate(blocks):
        fn = partial(_forward_loss, block, xs[i], target) if i == n - 1 else partial(block, xs[i])
        y = timer.time(f_s[i], fn)
        outs.append(y)
        xs.append(y.detach().requires_grad_(True))
    for i in reversed(range(n)):
        timer.time(b_s[i], outs[i].backward if i == n - 1 else partial(outs[i].backward, xs[i + 1].grad))
    for i, opt in enumerate(opts):
        if opt is not None:
            timer.time(u_s[i], opt.step)
        else:
            u_s[i].append(0.0)
    timer.flush()
    return f_s, b_s, u_s, [_detached(xs[i + 1].grad) for i in range(n)]


def _detached(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


def _forward_loss(block: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The last block's forward with the loss (what its stage computes)."""
    return _loss(block(x), target)


def _whole_step(model: LayeredModel, x0: torch.Tensor, target: torch.Tensor,
                opt: torch.optim.Optimizer) -> None:
    """The whole model's training step in one piece."""
    _loss(model(x0), target).backward()
    opt.step()


def _layer_profile(model: LayeredModel, i: int, times: _BlockTimes, saved: int, output_bytes: int,
                   flops: int, backward_flops: int, conv_share: float | None) -> LayerProfile:
    """Block ``i``'s profile: the median of each phase's samples, the spread, the static counts."""
    medians: dict[str, float] = {}
    spread: dict[str, dict[str, float]] = {}
    for f in fields(times):
        medians[f.name], spread[f.name] = _stats(getattr(times, f.name)[i])
    block = model.blocks[i]
    return LayerProfile(
        name=model.block_names[i],
        forward_s=medians["forward_s"],
        backward_s=medians["backward_s"],
        update_s=medians["update_s"],
        param_bytes=sum(_nbytes(p) for p in block.parameters()),
        output_bytes=output_bytes,
        saved_bytes=saved,
        flops=flops,
        weight_layers=model.weight_layers[i],
        backward_flops=backward_flops,
        spread=spread,
        backward_input_s=medians["backward_input_s"],
        backward_weight_s=medians["backward_weight_s"],
        conv_flop_share=conv_share,
    )


def _split_backward_round(model: LayeredModel, x0: torch.Tensor, target: torch.Tensor,
                          grads: list[torch.Tensor | None], timer: _Timer
                          ) -> tuple[list[list[float]], list[list[float]]]:
    """One round of split-backward timings: per block, the input-gradient half and the
    weight-gradient half, each fed the output gradient of the block-by-block step
    (``grads[i]``: d loss / d output of block i; None for the last block, whose output
    is the loss). The cut is found on the block's graph before ``I`` is timed."""
    blocks = model.blocks
    n = len(blocks)
    i_s = _per_block(n)
    w_s = _per_block(n)
    with torch.no_grad():
        inputs = [x0]
        for block in blocks[:-1]:
            inputs.append(block(inputs[-1]))
    for i, block in enumerate(blocks):
        x = inputs[i].detach().requires_grad_(i > 0)
        params = [p for p in block.parameters() if p.requires_grad]
        y = block(x)
        out_grads: list[torch.Tensor | None] = [None]
        if i == n - 1:
            outs = [_loss(y, target)]
        else:
            outs = _tensor_outputs(y)
            g = grads[i]
            out_grads = [g if len(outs) == 1 and g is not None and g.shape == o.shape else None for o in outs]
        split = GraphSplit(outs, out_grads, [x], params)
        timer.time(i_s[i], split.input_grads)
        timer.flush()
        if split.groups:
            timer.time(w_s[i], split.weight_grads)
        else:
            w_s[i].append(0.0)
        timer.flush()
    return i_s, w_s


def _tensor_outputs(y: Any) -> list[torch.Tensor]:
    """A block's output tensors that carry a gradient (a block may return a tuple or list)."""
    if isinstance(y, torch.Tensor):
        return [y]
    if isinstance(y, (tuple, list)):
        return [t for t in y if isinstance(t, torch.Tensor) and t.requires_grad]
    return []


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class BlockSumWarning(UserWarning):
    """A profile's block sum and whole-model time disagree beyond the bound (one line)."""


def profile_model(
    model: str | LayeredModel,
    batch_sizes: int | Sequence[int],
    *,
    device: str = "cpu",
    threads: int | None = RANK_THREADS,
    repeats: int = 5,
    warmup: int = 2,
    dtype: str = "float32",
    seed: int = 0,
    num_classes: int = 10,
    progress: Callable[[str], None] | None = None,
) -> Profile:
    """Profile ``model`` (a zoo name or a LayeredModel) at one or more batch sizes.

    The top-level ``layers`` are those of the first batch size given; with
    several, every one is stored in ``by_batch_size`` for interpolation. A profile whose
    block sum and whole-model time disagree beyond the documented bound
    (:mod:`stalesim.workloads.blocksum`) issues one :class:`BlockSumWarning` saying so and
    what to do.
    """
    sizes = _check_profile_args(batch_sizes, repeats, warmup, threads)
    dev = parse_device(device)
    tdtype = parse_dtype(dtype)
    net = build_model(model, num_classes=num_classes, seed=seed) if isinstance(model, str) else model
    if not isinstance(net, LayeredModel):
        raise StalesimError("model: expected a zoo name or a LayeredModel")
    net = net.to(dev, tdtype).train()

    load_before = _loadavg()
    old_threads = torch.get_num_threads()
    if dev.type == "cpu" and threads is not None:
        torch.set_num_threads(threads)
    precision = precision_in_force(dev, tdtype)
    flags = precision_flags()
    try:
        with _on_device(dev):
            points, whole_spread = _measure_sizes(net, sizes, dev, tdtype, repeats, warmup, seed, progress)
    finally:
        torch.set_num_threads(old_threads)
    first = points[0]
    layer_sum = sum(lp.compute_s for lp in first.layers)
    ratio = layer_sum / first.whole_model_s if first.whole_model_s else None
    prof = Profile(
        model=net.name,
        device=str(dev),
        dtype=str(tdtype).replace("torch.", ""),
        batch_size=first.batch_size,
        layers=list(first.layers),
        threads=threads if dev.type == "cpu" and threads else
        (torch.get_num_threads() if dev.type == "cpu" else None),
        repeats=repeats,
        warmup=warmup,
        whole_model_s=first.whole_model_s,
        sum_over_whole_ratio=ratio,
        by_batch_size=sorted(points, key=lambda p: p.batch_size) if len(points) > 1 else None,
        meta=_profile_meta(dev, load_before, whole_spread, flags),
        schema_version=SCHEMA_VERSION,
        precision=precision,
    )
    msg = block_sum_warning(prof)
    if msg is not None:
        warnings.warn(msg, BlockSumWarning, stacklevel=2)
    return prof


def _check_profile_args(batch_sizes: int | Sequence[int], repeats: int, warmup: int,
                        threads: int | None) -> list[int]:
    """The batch sizes as a list, after checking them and the round counts."""
    sizes = [batch_sizes] if isinstance(batch_sizes, int) else list(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise StalesimError(f"batch_size: expected integers >= 1, got {batch_sizes!r}")
    if len(set(sizes)) != len(sizes):
        raise StalesimError(f"batch_size: duplicate values in {sizes}")
    if repeats < 1:
        raise StalesimError(f"repeats: expected an integer >= 1, got {repeats}")
    if warmup < 0:
        raise StalesimError(f"warmup: expected an integer >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise StalesimError(f"threads: expected an integer >= 1, got {threads}")
    return sizes


def _profile_meta(dev: torch.device, load_before: float | None,
                  whole_spread: dict[str, dict[str, float]], flags: dict[str, Any]) -> dict[str, Any]:
    """Where and how the profile was measured (read after the measurement: the load after)."""
    return {
        "device_name": _device_name(dev),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "timer": "cuda-events" if dev.type == "cuda" else "perf_counter",
        "update": "SGD(momentum=0.9) step over the block's parameters",
        # 1-minute load average before/after: a busy shared machine explains wide spreads
        "loadavg_1min": [load_before, _loadavg()],
        "cpu_count": os.cpu_count(),
        "whole_model_spread_s": whole_spread,
        # torch's precision switches as they were (the profile's ``precision`` is what they meant)
        "precision_flags": flags,
    }


def _measure_sizes(net: LayeredModel, sizes: list[int], dev: torch.device, tdtype: torch.dtype,
                   repeats: int, warmup: int, seed: int, progress: Callable[[str], None] | None,
                   ) -> tuple[list[BatchPoint], dict[str, dict[str, float]]]:
    """Every batch size in turn (the caller makes ``dev`` current)."""
    points: list[BatchPoint] = []
    whole_spread: dict[str, dict[str, float]] = {}
    for b in sizes:
        if progress:
            progress(f"profiling {net.name} batch {b} on {dev} ({repeats} repeats)")
        layers, whole, w_sp = _measure_batch(net, b, dev, tdtype, repeats, warmup, seed)
        whole_spread[str(b)] = w_sp
        points.append(BatchPoint(b, tuple(layers), whole))
    return points, whole_spread
