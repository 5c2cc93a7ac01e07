"""Measure GEMM and fused-attention throughput by shape on this machine (``stalesim calibrate --gemm``).

Times ``torch.matmul`` over a grid of (m, n, k) and
``torch.nn.functional.scaled_dot_product_attention`` (causal) over a grid of
(batch x heads, sequence, head dim) on the current device, and writes the table
:mod:`stalesim.workloads.kernel_efficiency` reads: per shape the median seconds,
the achieved TFLOP/s and the efficiency against the catalog device's dense peak
(attention FLOPs as the model counts them: causal blocks only). On a GPU the
grid spans transformer training shapes in bf16; on a CPU a tiny float32 grid
runs in a second so that the command and its file format are tested without a
GPU (its efficiencies describe nothing the LLM estimate uses; each shape is timed
at most three times).

Timing: CUDA events around ``repeats`` calls after warm-up calls, the median
kept (per-call noise on a shared GPU is one-sided, the median resists it); on a
CPU, ``time.perf_counter`` the same way.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any

from stalesim.errors import StalesimError
from stalesim.workloads.kernel_efficiency import AttentionShape, GemmShape

__all__ = ["CPU_ATTENTION", "CPU_GEMMS", "GPU_ATTENTION", "GPU_GEMMS", "measure_kernels"]

# transformer training shapes: tokens per micro-batch and rank (m) by the tensor-parallel slices
# of hidden sizes 768 .. 12288 (n, k)
GPU_GEMMS = tuple(GemmShape(m, n, k) for m in (512, 2048, 8192, 32768)
                  for n in (768, 1536, 3072, 6144, 12288) for k in (768, 1536, 3072, 6144, 12288))
GPU_ATTENTION = tuple(AttentionShape(1, bh, s, d) for bh in (8, 32, 128) for s in (1024, 2048, 4096, 8192)
                      for d in (64, 128))
CPU_GEMMS = (GemmShape(64, 64, 64), GemmShape(128, 64, 32))
CPU_ATTENTION = (AttentionShape(1, 2, 64, 16),)
_WARMUP = 3
_DRY_REPEATS = 3


def _timer(device: Any) -> Any:
    import torch

    if device.type == "cuda":
        def cuda_time(fn: Any) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        return cuda_time

    def cpu_time(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return cpu_time


def _median_s(fn: Any, timer: Any, repeats: int) -> float:
    for _ in range(_WARMUP):
        fn()
    return statistics.median(timer(fn) for _ in range(repeats))


def _device_key(device: Any) -> str | None:
    import torch

    from stalesim.workloads.hardware import gpu_catalog_key

    if device.type != "cuda":
        return "cpu-core"
    props = torch.cuda.get_device_properties(device)
    return gpu_catalog_key(torch.cuda.get_device_name(device), float(props.total_memory))


def measure_kernels(device_key: str | None = None, repeats: int = 5, gemms: tuple[GemmShape, ...] | None = None,
                    attention: tuple[AttentionShape, ...] | None = None) -> dict[str, Any]:
    """The kernel table of this machine's first GPU (or its CPU: the dry grid), as a JSON-able dict.

    ``device_key``: the catalog device whose peak the efficiencies divide by (default: the GPU's
    own catalog entry, ``cpu-core`` on a CPU); a GPU the catalog does not know needs it."""
    import torch

    from stalesim.workloads.hardware import get_device

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    key = device_key or _device_key(device)
    if key is None:
        raise StalesimError(f"gemm-device: {torch.cuda.get_device_name(device)} is not in the device catalog; "
                            "name the catalog device whose peak to compare with")
    spec = get_device(key)
    dtype_name = "bfloat16" if cuda else "float32"
    dtype = getattr(torch, dtype_name)
    peak = spec.flops_per_s(dtype_name)
    timer = _timer(device)
    if not cuda:  # the dry grid checks the command and its format: a few calls per shape are enough
        repeats = min(repeats, _DRY_REPEATS)
    rows = []
    for g in gemms if gemms is not None else (GPU_GEMMS if cuda else CPU_GEMMS):
        operands = (torch.randn(g.m, g.k, device=device, dtype=dtype),
                    torch.randn(g.k, g.n, device=device, dtype=dtype))
        s = _median_s(partial(torch.matmul, *operands), timer, repeats)
        rows.append({"m": g.m, "n": g.n, "k": g.k, "batch": g.batch, "seconds": s,
                     "tflops": g.flops / s / 1e12, "efficiency": g.flops / s / peak})
    att = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for sh in attention if attention is not None else (GPU_ATTENTION if cuda else CPU_ATTENTION):
        q, k, v = (torch.randn(sh.batch, sh.heads, sh.seq, sh.head_dim, device=device, dtype=dtype)
                   for _ in range(3))
        s = _median_s(partial(sdpa, q, k, v, is_causal=True), timer, repeats)
        att.append({"batch": sh.batch, "heads": sh.heads, "seq": sh.seq, "head_dim": sh.head_dim,
                    "causal": True, "seconds": s, "tflops": sh.executed_flops / s / 1e12,
                    "efficiency": sh.executed_flops / s / peak})
    return {"schema_version": 1, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "device_key": key, "dtype": dtype_name, "peak_flops": peak, "repeats": repeats,
            "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "dry": not cuda, "gemm": rows, "attention": att}
