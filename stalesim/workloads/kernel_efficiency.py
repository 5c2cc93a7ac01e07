"""Achievable fraction of a GPU's peak for one GEMM or one fused attention kernel, by shape.

The LLM-scale estimate times every matrix multiply of a layer by its own shape
instead of one constant fraction of peak, so that a micro-batch of 1 and one of
16 of the same layer, or a tensor-parallel slice of 1/8, do not all run at the
same efficiency. Three first-principles terms, none fitted to a published
throughput row:

* **ceiling**: the best fraction of the dense peak the GPU class reaches on a
  large, well-shaped GEMM (or fused attention kernel), from a published
  measurement named in ``stalesim/data/kernel_efficiency/ceilings.json``
  (MAMF for GEMMs, the FlashAttention papers for attention);
* **wave quantization**: a GEMM's output is computed in tiles (128 x 256,
  256 x 128 or 128 x 128 output elements per thread block, the CUTLASS/cuBLAS
  tensor-core tile sizes), one tile per streaming multiprocessor at a time; the
  last wave of tiles leaves SMs idle and partial tiles compute padding. The
  fill ``m n / (waves x SMs x tile_m x tile_n)`` is NVIDIA's own model
  ("Matrix Multiplication Background User's Guide", NVIDIA Deep Learning
  Performance docs: tile and wave quantization), taken at the best of the
  three tiles, as cuBLAS's heuristics choose one; fused attention has one
  thread block per 128 queries of a (batch, head) (FlashAttention-2's forward
  block), the same fill over its blocks;
* **roofline**: no kernel is faster than its operands' bytes (read A and B,
  write C once) over the memory bandwidth.

A GPU measured with ``stalesim calibrate --gemm`` (:mod:`stalesim.workloads.kernel_calibration`)
has a table of achieved efficiencies; at a measured shape the table's figure is
used, between shapes the nearest measured one (in log2 of each dimension)
scaled by the model's ratio between the two shapes, so the shape effects stay
while the level is the measurement's. The table is looked up by the device's
catalog key (package data ``<key>.json`` beside ``ceilings.json``) or named by
the ``STALESIM_KERNEL_TABLE`` environment variable.

Not modelled (known gaps): split-K for GEMMs of fewer tiles than SMs (small
GEMMs come out pessimistic), the k-loop's prologue/epilogue for a short inner
dimension, clock throttling under sustained power, and per-framework kernel
overheads (no citable measurement separates them from the rest).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import DeviceSpec

__all__ = ["ATTENTION_BLOCK", "FLASH_KERNELS", "GEMM_TILES", "TABLE_ENV", "AttentionShape", "Ceilings",
           "GemmShape", "KernelTable", "attention_efficiency", "causal_fraction", "ceilings", "gemm_efficiency",
           "load_table", "table_for", "wave_fill"]

# output tile sizes (rows x columns per thread block) of the tensor-core GEMM kernels cuBLAS picks from
GEMM_TILES = ((128, 256), (256, 128), (128, 128))
# queries per thread block of a fused (flash) attention kernel (FlashAttention-2's forward block)
ATTENTION_BLOCK = 128
# the fused attention kernels with a published ceiling: FlashAttention-2 (what torch's SDPA runs) and
# FlashAttention-3 (Hopper only; elsewhere the same as FlashAttention-2)
FLASH_KERNELS = ("flash", "fa3")
# names a measured table that replaces the package's (a file written by `stalesim calibrate --gemm`)
TABLE_ENV = "STALESIM_KERNEL_TABLE"
# 16-bit dtypes run on the tensor cores the published ceilings measured
_TENSOR_DTYPES = ("bfloat16", "float16")
_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "tf32": 4}
_DATA = "data/kernel_efficiency"


@dataclass(frozen=True)
class GemmShape:
    """``batch`` independent products of an ``m x k`` and a ``k x n`` matrix."""

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    def operand_bytes(self, element_bytes: int) -> int:
        return element_bytes * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n)


@dataclass(frozen=True)
class AttentionShape:
    """One fused attention call: ``batch x heads`` independent heads of ``seq`` queries and keys."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool = True

    @property
    def executed_flops(self) -> float:
        """Forward FLOPs the kernel runs: ``4 s^2 d`` per head, of which a causal kernel skips the
        blocks above the diagonal (:func:`causal_fraction`)."""
        full = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return full * (causal_fraction(self.seq) if self.causal else 1.0)


def causal_fraction(seq: int) -> float:
    """Share of the ``seq x seq`` blocks a causal flash kernel computes: the lower triangle of
    ``B = ceil(seq / 128)`` blocks per side with its diagonal, ``(B + 1) / 2B`` (1/2 for long ones)."""
    b = math.ceil(seq / ATTENTION_BLOCK)
    return (b + 1) / (2 * b)


@dataclass(frozen=True)
class Ceilings:
    """Best published fraction of peak for one GPU class (``ceilings.json``)."""

    gemm: float
    flash: float
    fa3: float
    source: str

    def attention(self, kernel: str) -> float:
        if kernel not in FLASH_KERNELS:
            raise StalesimError(f"flash_kernel: expected one of {', '.join(FLASH_KERNELS)}, got {kernel!r}")
        return self.flash if kernel == "flash" else self.fa3


@lru_cache(maxsize=1)
def _ceiling_data() -> dict[str, Any]:
    text = resources.files("stalesim").joinpath(_DATA, "ceilings.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def ceilings(dev: DeviceSpec, dtype: str = "bfloat16") -> Ceilings:
    """The device's published ceilings, or the stated fallback (unmeasured GPUs, 32-bit dtypes, CPUs)."""
    data = _ceiling_data()
    d = data["devices"].get(dev.key) if dtype in _TENSOR_DTYPES else None
    if d is None:
        f = data["fallback"]
        return Ceilings(f["gemm"], f["flash"], f["fa3"], "fallback assumption (no published measurement)")
    return Ceilings(d["gemm"], d["flash"], d["fa3"], d["source"])


def wave_fill(sms: int | None, m: int, n: int, batch: int = 1, tiles: tuple[tuple[int, int], ...] = GEMM_TILES
              ) -> float:
    """Useful share of the SM-time a tiled kernel occupies: ``m n batch`` output elements over
    ``waves x SMs x tile area``, at the best tile (1 where the SM count is unknown)."""
    if not sms:
        return 1.0
    best = 0.0
    for tm, tn in tiles:
        blocks = batch * math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(blocks / sms)
        best = max(best, batch * m * n / (waves * sms * tm * tn))
    return best


def _model_gemm(dev: DeviceSpec, g: GemmShape, dtype: str) -> float:
    peak = dev.flops_per_s(dtype)
    compute_s = g.flops / (peak * ceilings(dev, dtype).gemm * wave_fill(dev.sm_count, g.m, g.n, g.batch))
    memory_s = g.operand_bytes(_ELEMENT_BYTES.get(dtype, 2)) / dev.mem_bandwidth_Bps
    return g.flops / (peak * max(compute_s, memory_s))


def _model_attention(dev: DeviceSpec, a: AttentionShape, dtype: str, kernel: str) -> float:
    # one thread block per ATTENTION_BLOCK queries of each head: a tile of ATTENTION_BLOCK x 1 "outputs"
    fill = wave_fill(dev.sm_count, a.seq, 1, a.batch * a.heads, tiles=((ATTENTION_BLOCK, 1),))
    return ceilings(dev, dtype).attention(kernel) * fill


@dataclass(frozen=True)
class KernelTable:
    """Achieved efficiencies measured on one GPU (``stalesim calibrate --gemm``): ``gemm`` rows of
    (m, n, k, batch, efficiency), ``attention`` rows of (batch, heads, seq, head_dim, efficiency)."""

    device: str
    device_key: str | None
    dtype: str
    gemm: tuple[tuple[int, int, int, int, float], ...]
    attention: tuple[tuple[int, int, int, int, float], ...] = ()

    @classmethod
    def from_dict(cls, d: Any, where: str = "kernel table") -> KernelTable:
        if not isinstance(d, dict) or not isinstance(d.get("gemm"), list):
            raise StalesimError(f"{where}: expected an object with a 'gemm' list (stalesim calibrate --gemm)")

        def rows(key: str, fields: tuple[str, ...]) -> tuple[tuple[Any, ...], ...]:
            out = []
            for i, r in enumerate(d.get(key, [])):
                try:
                    vals = tuple(int(r[f]) for f in fields) + (float(r["efficiency"]),)
                except (KeyError, TypeError, ValueError):
                    raise StalesimError(f"{where}.{key}[{i}]: needs integer {', '.join(fields)} and an "
                                        "efficiency") from None
                if min(vals[:-1]) < 1 or not 0 < vals[-1] < math.inf:
                    raise StalesimError(f"{where}.{key}[{i}]: sizes must be >= 1 and the efficiency positive")
                out.append(vals)
            return tuple(out)

        return cls(device=str(d.get("device", "")), device_key=d.get("device_key"),
                   dtype=str(d.get("dtype", "bfloat16")), gemm=rows("gemm", ("m", "n", "k", "batch")),
                   attention=rows("attention", ("batch", "heads", "seq", "head_dim")))


def _nearest(rows: tuple[tuple[Any, ...], ...], q: tuple[int, ...]) -> tuple[Any, ...] | None:
    def dist(r: tuple[Any, ...]) -> float:
        return sum((math.log2(a) - math.log2(b)) ** 2 for a, b in zip(r[:-1], q))

    return min(rows, key=dist) if rows else None


def load_table(path: str | Path) -> KernelTable:
    """A measured table from a JSON file (one-line error naming the file when it is not one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StalesimError(f"{TABLE_ENV}: cannot read a kernel table from {path}: {e}") from None
    return KernelTable.from_dict(data, where=str(path))


@lru_cache(maxsize=16)
def _package_table(key: str) -> KernelTable | None:
    f = resources.files("stalesim").joinpath(_DATA, f"{key}.json")
    if not f.is_file():
        return None
    return KernelTable.from_dict(json.loads(f.read_text(encoding="utf-8")), where=f"{_DATA}/{key}.json")


def table_for(dev: DeviceSpec) -> KernelTable | None:
    """The measured table that applies to ``dev``: the file ``$STALESIM_KERNEL_TABLE`` names, else
    the package's for its catalog key, else None (the model alone)."""
    env = os.environ.get(TABLE_ENV)
    if env:
        return _env_table(env)
    return _package_table(dev.key) if dev.key else None


@lru_cache(maxsize=4)
def _env_table(path: str) -> KernelTable:
    return load_table(path)


def gemm_efficiency(dev: DeviceSpec, g: GemmShape, dtype: str = "bfloat16",
                    table: KernelTable | None = None) -> float:
    """Achieved FLOP/s over the peak for GEMM ``g`` (module doc): the model, or the measured
    table's nearest shape scaled by the model's ratio between the two shapes."""
    model = _model_gemm(dev, g, dtype)
    if table is not None and table.dtype == dtype:
        near = _nearest(table.gemm, (g.m, g.n, g.k, g.batch))
        if near is not None:
            m, n, k, b, eff = near
            return min(1.0, eff * model / _model_gemm(dev, GemmShape(m, n, k, b), dtype))
    return model


def attention_efficiency(dev: DeviceSpec, a: AttentionShape, dtype: str = "bfloat16", kernel: str = "flash",
                         table: KernelTable | None = None) -> float:
    """Achieved FLOP/s (of :attr:`AttentionShape.executed_flops`) over the peak for one fused
    attention kernel, forward or backward (the published ceilings are of the forward; the backward
    is taken at the same fraction: a known gap)."""
    model = _model_attention(dev, a, dtype, kernel)
    if table is not None and table.dtype == dtype:
        near = _nearest(table.attention, (a.batch, a.heads, a.seq, a.head_dim))
        if near is not None:
            b, h, s, d, eff = near
            return min(1.0, eff * model / _model_attention(dev, AttentionShape(b, h, s, d), dtype, kernel))
    return model
