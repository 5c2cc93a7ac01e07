"""Per-layer profiles: the measured (or estimated) cost of every block.

A :class:`Profile` is what the simulator consumes: for each partitionable block
the forward, backward and optimizer-update seconds, and the bytes that matter
for memory and communication. It is produced by ``stalesim profile`` (see
:mod:`stalesim.workloads.profiler`), by :func:`uniform_profile` for synthetic
tests, or by :func:`stalesim.workloads.hardware.roofline_profile` for a device
you do not own. The JSON form is validated field by field on load so a bad
file fails with one line naming the field, never deep inside the simulator.

JSON schema (``schema_version`` 1)::

    {"schema_version": 1, "model": str, "device": str, "dtype": str,
     "batch_size": int, "threads": int|null, "repeats": int|null, "warmup": int|null,
     "whole_model_s": float|null, "sum_over_whole_ratio": float|null,
     "layers": [{"name", "forward_s", "backward_s", "update_s", "param_bytes",
                 "output_bytes", "saved_bytes", "flops", "weight_layers"?,
                 "backward_flops"?, "backward_input_s"?, "backward_weight_s"?,
                 "conv_flop_share"?, "spread"?}, ...],
     "by_batch_size"?: [{"batch_size": int, "layers": [...], "whole_model_s"?}, ...],
     "precision"?: {"conv_tf32": bool, "matmul_tf32": bool, "autocast": str|null},
     "meta"?: {...}}

Times are seconds (medians over repeats), bytes are bytes, ``flops`` are
forward FLOPs of one mini-batch. ``spread`` (optional) holds, per time field,
``{"min", "max", "iqr"}`` over the repeats. ``weight_layers`` (the layer's count in
PPV numbering: conv/linear layers) may be omitted in a hand-written profile: it
defaults to 1 for a layer with parameters and 0 for one without.
``{"min", "max", "iqr"}`` over the repeats.

Precision (optional): ``dtype`` is the element type of the tensors, not how the
math ran. On CUDA, torch runs float32 convolutions as TF32 by default
(``torch.backends.cudnn.allow_tf32`` is True) while float32 matmuls stay IEEE
(``torch.backends.cuda.matmul.allow_tf32`` False, ``float32_matmul_precision``
``"highest"``), so a "float32" GPU profile is partly TF32. ``precision`` records
what was in force (:class:`Precision`: TF32 for convolutions, TF32 for matmuls,
the autocast dtype); ``conv_flop_share`` per layer (optional) is the share of its
FLOPs, forward and backward, in convolutions. The roofline
(:func:`stalesim.workloads.hardware.roofline_profile`) uses both to pick each
FLOP's peak. A profile without ``precision`` (files written before it, hand-written
or synthetic ones) is taken at its ``dtype`` label: IEEE math.

Split backward (optional, both or neither): ``backward_input_s`` is the block's
input-gradient half (``torch.autograd.grad`` of the output w.r.t. the block's
input only) and ``backward_weight_s`` its weight-gradient half (w.r.t. the
parameters only), what the ``I`` and ``W`` actions of the zero-bubble schedules
cost (:mod:`stalesim.workloads.graph_split` finds the cut). They add up to about
``backward_s``: each kernel runs once, in one half or the other, plus one more
autograd call per half (a parameter used at two depths re-runs the input-gradient
nodes between them in ``W``). A profile without them (older files, estimates)
splits ``backward_s`` by :data:`WEIGHT_GRAD_FRACTION` (see
:meth:`LayerProfile.backward_split`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.limits import (
    MAX_BYTES,
    MAX_COUNT,
    MAX_FACTOR,
    MAX_FLOPS,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_THREADS,
)

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.scaling import CostSource

__all__ = [
    "SCHEMA_VERSION",
    "LayerProfile",
    "Precision",
    "Profile",
    "load_profile",
    "profile_from_dict",
    "uniform_profile",
]

SCHEMA_VERSION = 1
_TIME_FIELDS = ("forward_s", "backward_s", "update_s")
# Share of a backward that is the weight gradient when the profile has no measured split:
# a conv or linear layer's backward is two GEMMs of equal FLOPs (input gradient,
# weight gradient), the zero-bubble paper's T_B = T_W assumption.
WEIGHT_GRAD_FRACTION = 0.5
_BYTE_FIELDS = ("param_bytes", "output_bytes", "saved_bytes")
# element types a profile may be measured (or estimated) in
DTYPES = ("float32", "float64", "bfloat16", "float16", "tf32")
# where a profile may come from: the profiler's torch devices, synthetic tests, or a
# catalog device (a hand-written profile, or "<key> (roofline)" from the roofline model)
_TORCH_DEVICES = ("cpu", "cuda")
# blocks of one profile: far beyond any real model (a per-operator profile of a large
# transformer has thousands), and small enough to read, check and partition in a second
MAX_LAYERS = 1 << 17


@dataclass(frozen=True)
class Precision:
    """How a profile's float math ran (what its ``dtype`` label does not say).

    ``conv_tf32``: float32 convolutions were allowed to run as TF32 (cuDNN; torch's
    default on CUDA). ``matmul_tf32``: float32 matmuls were (cuBLAS; off by default:
    ``float32_matmul_precision`` ``"highest"``). ``autocast``: the autocast dtype in
    force (``"bfloat16"``, ``"float16"``) or None when autocast was off.
    """

    conv_tf32: bool = False
    matmul_tf32: bool = False
    autocast: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"conv_tf32": self.conv_tf32, "matmul_tf32": self.matmul_tf32, "autocast": self.autocast}

    @classmethod
    def from_dict(cls, d: Any, where: str = "precision.") -> Precision:
        if not isinstance(d, Mapping):
            raise StalesimError(f"{where.rstrip('.')}: must be an object, got {type(d).__name__}")
        known = ("conv_tf32", "matmul_tf32", "autocast")
        extra = sorted(set(d) - set(known))
        if extra:
            raise StalesimError(f"{where}{extra[0]}: unknown field (known: {', '.join(known)})")
        flags = {}
        for k in ("conv_tf32", "matmul_tf32"):
            v = d.get(k, False)
            if not isinstance(v, bool):
                raise StalesimError(f"{where}{k}: must be true or false, got {v!r}")
            flags[k] = v
        ac = d.get("autocast")
        if ac is not None and ac not in DTYPES:
            raise StalesimError(f"{where}autocast: expected null or one of {', '.join(DTYPES)}, got {ac!r}")
        return cls(conv_tf32=flags["conv_tf32"], matmul_tf32=flags["matmul_tf32"], autocast=ac)


@dataclass(frozen=True)
class LayerProfile:
    """Cost of one block at the profile's batch size."""

    name: str
    forward_s: float
    backward_s: float
    update_s: float = 0.0
    param_bytes: int = 0
    output_bytes: int = 0
    saved_bytes: int = 0
    flops: int = 0
    weight_layers: int = 1
    backward_flops: int | None = None
    spread: dict[str, dict[str, float]] | None = None
    backward_input_s: float | None = None
    backward_weight_s: float | None = None
    # share of the block's FLOPs (forward + backward) in convolutions; None: not measured
    conv_flop_share: float | None = None

    @property
    def compute_s(self) -> float:
        """Forward + backward + update seconds (what a stage spends per batch)."""
        return self.forward_s + self.backward_s + self.update_s

    @property
    def measured_split(self) -> bool:
        return self.backward_input_s is not None and self.backward_weight_s is not None

    def backward_split(self) -> tuple[float, float]:
        """(input-gradient s, weight-gradient s): measured, else ``backward_s`` split by
        :data:`WEIGHT_GRAD_FRACTION`."""
        if self.backward_input_s is not None and self.backward_weight_s is not None:
            return self.backward_input_s, self.backward_weight_s
        w = self.backward_s * WEIGHT_GRAD_FRACTION
        return self.backward_s - w, w

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "update_s": self.update_s,
            "param_bytes": self.param_bytes,
            "output_bytes": self.output_bytes,
            "saved_bytes": self.saved_bytes,
            "flops": self.flops,
            "weight_layers": self.weight_layers,
        }
        if self.backward_flops is not None:
            d["backward_flops"] = self.backward_flops
        if self.measured_split:
            d["backward_input_s"] = self.backward_input_s
            d["backward_weight_s"] = self.backward_weight_s
        if self.conv_flop_share is not None:
            d["conv_flop_share"] = self.conv_flop_share
        if self.spread is not None:
            d["spread"] = {k: dict(v) for k, v in self.spread.items()}
        return d


@dataclass(frozen=True)
class BatchPoint:
    """The layers measured at one batch size (for interpolation)."""

    batch_size: int
    layers: tuple[LayerProfile, ...]
    whole_model_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"batch_size": self.batch_size,
                             "layers": [lp.to_dict() for lp in self.layers]}
        if self.whole_model_s is not None:
            d["whole_model_s"] = self.whole_model_s
        return d


@dataclass(frozen=True)
class Profile:
    """A whole model's per-block costs; ``layers[i]`` is block i of the model."""

    model: str
    device: str
    dtype: str
    batch_size: int
    layers: list[LayerProfile]
    threads: int | None = None
    repeats: int | None = None
    warmup: int | None = None
    whole_model_s: float | None = None
    sum_over_whole_ratio: float | None = None
    by_batch_size: list[BatchPoint] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    # the precision flags in force when measured (None: not recorded; taken as the dtype label)
    precision: Precision | None = None
    # how times are carried outside the measured batch sizes (a choice of the user, not a
    # measurement: not written to JSON); see stalesim.workloads.scaling
    extrapolation: str = "conservative"

    # ------------------------------------------------------------ accessors
    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def names(self) -> list[str]:
        return [lp.name for lp in self.layers]

    @property
    def weight_layers(self) -> list[int]:
        return [lp.weight_layers for lp in self.layers]

    def costs(self) -> list[float]:
        """Per-layer forward+backward+update seconds (the partitioner's default cost)."""
        return [lp.compute_s for lp in self.layers]

    def memory(self, *, versions: int = 1) -> list[float]:
        """Per-layer bytes a stage holds: params x versions + saved activations."""
        return [lp.param_bytes * versions + lp.saved_bytes for lp in self.layers]

    def stage_layers(self, cuts: Sequence[int]) -> list[LayerProfile]:
        """Aggregate blocks into stages given block cuts (sums; output = last block's)."""
        from stalesim.workloads.partition import stage_ranges

        out = []
        for s, (a, b) in enumerate(stage_ranges(list(cuts), self.n_layers)):
            ls = self.layers[a:b]
            # the stage's backward FLOPs are known only when every block's are
            bf = [lp.backward_flops for lp in ls if lp.backward_flops is not None]
            split = all(lp.measured_split for lp in ls)
            share = _combined_conv_share(ls)
            out.append(LayerProfile(
                name=f"stage{s}",
                forward_s=sum(lp.forward_s for lp in ls),
                backward_s=sum(lp.backward_s for lp in ls),
                update_s=sum(lp.update_s for lp in ls),
                param_bytes=sum(lp.param_bytes for lp in ls),
                output_bytes=ls[-1].output_bytes,
                saved_bytes=sum(lp.saved_bytes for lp in ls),
                flops=sum(lp.flops for lp in ls),
                weight_layers=sum(lp.weight_layers for lp in ls),
                backward_flops=sum(bf) if len(bf) == len(ls) else None,
                backward_input_s=sum(lp.backward_split()[0] for lp in ls) if split else None,
                backward_weight_s=sum(lp.backward_split()[1] for lp in ls) if split else None,
                conv_flop_share=share,
            ))
        return out

    # ------------------------------------------------------------ batch size
    @property
    def measured_batch_sizes(self) -> list[int]:
        """Batch sizes the times were measured at (sorted); empty for a roofline estimate."""
        if self.is_roofline:
            return []
        if self.by_batch_size:
            return sorted(p.batch_size for p in self.by_batch_size)
        return [self.batch_size]

    @property
    def is_roofline(self) -> bool:
        """True when the times are a roofline estimate (re-timed at any batch size)."""
        from stalesim.workloads.hardware import roofline_params

        return roofline_params(self.meta) is not None

    def with_extrapolation(self, rule: str) -> Profile:
        """The same profile, extrapolating outside its measured range by ``rule``
        (``conservative`` or ``trend``; see :mod:`stalesim.workloads.scaling`)."""
        from stalesim.workloads.scaling import check_rule

        return replace(self, extrapolation=check_rule(rule))

    def cost_source(self, batch_size: int) -> CostSource:
        """Whether the times at ``batch_size`` are measured, interpolated, extrapolated or roofline."""
        from stalesim.workloads.scaling import classify

        _check_batch(batch_size)
        roof = self.is_roofline
        return classify(self.measured_batch_sizes or [self.batch_size], batch_size,
                        self.extrapolation, roofline=roof)

    def at_batch_size(self, batch_size: int) -> Profile:
        """This profile at another batch size.

        Measured batch sizes are used as measured; between two of them times are
        interpolated piecewise-linearly; outside the range they are extrapolated
        by ``self.extrapolation`` (default ``conservative``: never a per-sample
        cost lower than measured; see :mod:`stalesim.workloads.scaling` for the
        rule and why it is conservative on both sides). Update time and
        parameter bytes do not depend on the batch size; activation bytes and
        FLOPs are exact counts, scaled proportionally. A roofline profile is
        re-timed from its scaled counts (:func:`~stalesim.workloads.hardware.roofline_layer`).
        :meth:`cost_source` says which case applies. The measured points are
        kept (``by_batch_size``), so the result remembers what was measured.
        """
        from stalesim.workloads.hardware import roofline_layer, roofline_params
        from stalesim.workloads.scaling import scale_counts, scale_points

        _check_batch(batch_size)
        rf = roofline_params(self.meta)
        if rf is not None:
            f = batch_size / self.batch_size
            layers = [roofline_layer(scale_counts(lp, f), rf) for lp in self.layers]
            return replace(self, batch_size=batch_size, layers=layers, whole_model_s=None,
                           sum_over_whole_ratio=None)
        points = self.by_batch_size or [
            BatchPoint(self.batch_size, tuple(self.layers), self.whole_model_s)
        ]
        layers, whole = scale_points(points, batch_size, self.extrapolation)
        ratio = None
        if whole:
            ratio = sum(lp.compute_s for lp in layers) / whole
        return replace(self, batch_size=batch_size, layers=layers, whole_model_s=whole,
                       sum_over_whole_ratio=ratio, by_batch_size=list(points))

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema_version": self.schema_version,
            "model": self.model,
            "device": self.device,
            "dtype": self.dtype,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "whole_model_s": self.whole_model_s,
            "sum_over_whole_ratio": self.sum_over_whole_ratio,
            "layers": [lp.to_dict() for lp in self.layers],
        }
        if self.by_batch_size:
            d["by_batch_size"] = [p.to_dict() for p in self.by_batch_size]
        if self.precision is not None:
            d["precision"] = self.precision.to_dict()
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The JSON text; with ``path``, also write it atomically."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False)
        if path is not None:
            _write_atomic(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, data: Any) -> Profile:
        return profile_from_dict(data)


def _combined_conv_share(layers: Sequence[LayerProfile]) -> float | None:
    """The conv share of several blocks together (FLOP-weighted; None if one is unknown)."""
    if any(lp.conv_flop_share is None for lp in layers):
        return None
    total = [lp.flops + (lp.backward_flops if lp.backward_flops is not None else 2 * lp.flops) for lp in layers]
    if sum(total) <= 0:
        return 0.0
    return sum(t * (lp.conv_flop_share or 0.0) for t, lp in zip(total, layers)) / sum(total)


def _write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Readers never see half a file; bad targets are one-line errors (:mod:`stalesim.atomic`)."""
    from stalesim.atomic import write_text_atomic

    write_text_atomic(path, text)


def _check_batch(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise StalesimError(f"batch_size: expected an integer >= 1, got {batch_size!r}")


# ---------------------------------------------------------------- validation
def _num(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True,
         default: float | None = None, maximum: float = MAX_SECONDS) -> float | None:
    if key not in obj or obj[key] is None:
        if required:
            raise StalesimError(f"{where}{key}: missing")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) or v < 0:
        raise StalesimError(f"{where}{key}: must be a finite number >= 0, got {v!r}")
    if v > maximum:  # sums of such times must stay finite (integer ns in the simulator)
        raise StalesimError(f"{where}{key}: {v!r} is larger than this tool handles (at most {maximum:g})")
    return float(v)


def _finite(v: int | float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float range
        return False


def _int(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True,
         default: int | None = None, minimum: int = 0, maximum: float = MAX_COUNT) -> int | None:
    if key not in obj or obj[key] is None:
        if required:
            raise StalesimError(f"{where}{key}: missing")
        return default
    v = obj[key]
    ok = not isinstance(v, bool) and (
        isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    )
    if not ok or v < minimum:
        raise StalesimError(f"{where}{key}: must be an integer >= {minimum}, got {v!r}")
    if v > maximum:
        raise StalesimError(f"{where}{key}: {v!r} is larger than this tool handles (at most {maximum:g})")
    return int(v)


def _check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise StalesimError(f"dtype: unknown {dtype!r} (known: {', '.join(DTYPES)})")
    return dtype


def _check_device(device: str, meta: Mapping[str, Any]) -> str:
    """The profiler's torch device, ``synthetic``, or a catalog device (``<key> (roofline)``
    for a roofline estimate); anything else would be classified (CPU or GPU) by guesswork."""
    from stalesim.workloads.hardware import device_names, get_device

    name = device.strip()
    base, _, idx = name.partition(":")
    if base in _TORCH_DEVICES and (not idx or (base == "cuda" and idx.isdigit())):
        return device
    if name == "synthetic":
        return device
    if name.endswith(" (roofline)") and "roofline" in meta:
        name = name[: -len(" (roofline)")]
    try:
        get_device(name)
    except StalesimError:
        raise StalesimError(
            f"device: unknown {device!r} (expected cpu, cuda[:N], synthetic or a catalog device: "
            f"{', '.join(device_names())})") from None
    return device


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    if key not in obj:
        raise StalesimError(f"{where}{key}: missing")
    v = obj[key]
    if not isinstance(v, str) or not v:
        raise StalesimError(f"{where}{key}: must be a non-empty string, got {v!r}")
    return v


def _layer_from_dict(d: Any, where: str) -> LayerProfile:
    if not isinstance(d, Mapping):
        raise StalesimError(f"{where.rstrip('.')}: must be an object, got {type(d).__name__}")
    spread = d.get("spread")
    if spread is not None:
        if not isinstance(spread, Mapping):
            raise StalesimError(f"{where}spread: must be an object")
        for k, v in spread.items():
            if not isinstance(v, Mapping):
                raise StalesimError(f"{where}spread.{k}: must be an object")
            for kk in v:
                _num(v, kk, f"{where}spread.{k}.", maximum=MAX_SECONDS)
        spread = {str(k): {str(kk): float(vv) for kk, vv in v.items()} for k, v in spread.items()}
    param_bytes = _int(d, "param_bytes", where, maximum=MAX_BYTES)
    if ("backward_input_s" in d) != ("backward_weight_s" in d):
        have, miss = (("backward_input_s", "backward_weight_s") if "backward_input_s" in d
                      else ("backward_weight_s", "backward_input_s"))
        raise StalesimError(f"{where}{miss}: missing (a split backward gives both, {have} is given)")
    return LayerProfile(
        name=_str(d, "name", where),
        forward_s=_num(d, "forward_s", where),  # type: ignore[arg-type]
        backward_s=_num(d, "backward_s", where),  # type: ignore[arg-type]
        update_s=_num(d, "update_s", where),  # type: ignore[arg-type]
        param_bytes=param_bytes,  # type: ignore[arg-type]
        output_bytes=_int(d, "output_bytes", where, maximum=MAX_BYTES),  # type: ignore[arg-type]
        saved_bytes=_int(d, "saved_bytes", where, maximum=MAX_BYTES),  # type: ignore[arg-type]
        flops=_int(d, "flops", where, maximum=MAX_FLOPS),  # type: ignore[arg-type]
        weight_layers=_int(d, "weight_layers", where, required=False,  # type: ignore[arg-type]
                           default=1 if param_bytes else 0),
        backward_flops=_int(d, "backward_flops", where, required=False, maximum=MAX_FLOPS),
        spread=spread,
        backward_input_s=_num(d, "backward_input_s", where, required=False),
        backward_weight_s=_num(d, "backward_weight_s", where, required=False),
        conv_flop_share=_num(d, "conv_flop_share", where, required=False, maximum=1.0),
    )


def _layers_from(obj: Mapping[str, Any], where: str) -> list[LayerProfile]:
    if "layers" not in obj:
        raise StalesimError(f"{where}layers: missing")
    raw = obj["layers"]
    if not isinstance(raw, list) or not raw:
        raise StalesimError(f"{where}layers: must be a non-empty list")
    if len(raw) > MAX_LAYERS:  # checked before any layer is (a few microseconds each)
        raise StalesimError(f"{where}layers: {len(raw):,} layers are more than this tool handles "
                            f"(at most {MAX_LAYERS:,})")
    return [_layer_from_dict(x, f"{where}layers[{i}].") for i, x in enumerate(raw)]


def profile_from_dict(data: Any) -> Profile:
    """Build a :class:`Profile` from parsed JSON, validating every field."""
    if not isinstance(data, Mapping):
        raise StalesimError(f"profile: must be a JSON object, got {type(data).__name__}")
    sv = _int(data, "schema_version", "", minimum=1)
    if sv != SCHEMA_VERSION:
        raise StalesimError(
            f"schema_version: unsupported {sv} (this stalesim reads {SCHEMA_VERSION})"
        )
    layers = _layers_from(data, "")
    by = data.get("by_batch_size")
    points: list[BatchPoint] | None = None
    if by is not None:
        if not isinstance(by, list) or not by:
            raise StalesimError("by_batch_size: must be a non-empty list")
        if len(by) > 1024:
            raise StalesimError(f"by_batch_size: {len(by)} batch sizes are more than this tool handles (1024)")
        points = []
        seen: set[int] = set()
        for i, p in enumerate(by):
            w = f"by_batch_size[{i}]."
            if not isinstance(p, Mapping):
                raise StalesimError(f"by_batch_size[{i}]: must be an object")
            b = _int(p, "batch_size", w, minimum=1)
            assert b is not None
            if b in seen:
                raise StalesimError(f"{w}batch_size: duplicate {b}")
            seen.add(b)
            pl = _layers_from(p, w)
            if [x.name for x in pl] != [x.name for x in layers]:
                raise StalesimError(f"{w}layers: names differ from the top-level layers")
            points.append(BatchPoint(b, tuple(pl), _num(p, "whole_model_s", w, required=False)))
    meta = data.get("meta", {})
    if not isinstance(meta, Mapping):
        raise StalesimError("meta: must be an object")
    prec = data.get("precision")
    return Profile(
        model=_str(data, "model", ""),
        device=_check_device(_str(data, "device", ""), meta),
        dtype=_check_dtype(_str(data, "dtype", "")),
        batch_size=_int(data, "batch_size", "", minimum=1),  # type: ignore[arg-type]
        layers=layers,
        threads=_int(data, "threads", "", required=False, minimum=1, maximum=MAX_THREADS),
        repeats=_int(data, "repeats", "", required=False, minimum=1, maximum=MAX_REPEATS),
        warmup=_int(data, "warmup", "", required=False, maximum=MAX_REPEATS),
        whole_model_s=_num(data, "whole_model_s", "", required=False),
        sum_over_whole_ratio=_num(data, "sum_over_whole_ratio", "", required=False,
                                  maximum=MAX_FACTOR),
        by_batch_size=points,
        meta=dict(meta),
        schema_version=sv,
        precision=None if prec is None else Precision.from_dict(prec),
    )


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile JSON file (StalesimError names the bad field)."""
    from stalesim.workloads.jsondoc import read_json

    data = read_json(path, "profile")
    try:
        return profile_from_dict(data)
    except StalesimError as exc:
        raise StalesimError(f"profile {os.fspath(path)!r}: {exc}") from None


def uniform_profile(
    n_layers: int,
    forward_s: float,
    backward_s: float,
    batch_size: int,
    update_s: float = 0.0,
    param_bytes: int = 0,
    output_bytes: int = 0,
    saved_bytes: int = 0,
    *,
    model: str = "uniform",
    device: str = "synthetic",
    dtype: str = "float32",
) -> Profile:
    """A synthetic profile of ``n_layers`` identical one-weight-layer blocks (for tests)."""
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise StalesimError(f"n_layers: expected an integer >= 1, got {n_layers!r}")
    d = {
        "schema_version": SCHEMA_VERSION, "model": model, "device": device, "dtype": dtype,
        "batch_size": batch_size,
        "layers": [
            {"name": f"layer{i}", "forward_s": forward_s, "backward_s": backward_s,
             "update_s": update_s, "param_bytes": param_bytes, "output_bytes": output_bytes,
             "saved_bytes": saved_bytes, "flops": 0, "weight_layers": 1}
            for i in range(n_layers)
        ],
    }
    return profile_from_dict(d)
