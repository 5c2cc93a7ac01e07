"""Hardware descriptions: devices, links, the catalog, and the roofline what-if.

The simulator needs to know how fast a device computes and how a link moves
bytes. Devices and links come from a small catalog of real parts
(``catalog.json``, every figure with its datasheet source) or from
``stalesim calibrate`` (measured on this machine). A :class:`Hardware` is one
device kind plus one link kind plus the facts that decide whether
communication hides behind compute:

* ``comm_overlaps_compute``: GPUs have copy engines, so a transfer runs beside
  a kernel; a CPU rank under gloo does the copying itself.
* ``cpu_comm_occupancy`` in [0, 1]: the fraction of a transfer's time during
  which the sending/receiving core is busy (calibrated on CPU; 0 on GPUs).
* ``allreduce_algorithm``: ``ring`` (2(P-1)a + 2(P-1)/P n/b) or ``tree``
  (2 ceil(log2 P) (a + n/b)).

Hardware JSON (what ``calibrate`` writes and ``simulate --hardware`` reads)::

    {"schema_version": 1,
     "device": "h100-sxm" | {DeviceSpec fields},
     "link": "nvlink4" | {"name", "latency_s", "bandwidth_Bps" (null = unlimited), ...},
     "comm_overlaps_compute": bool, "cpu_comm_occupancy": float,
     "allreduce": {"algorithm": "ring" | "tree", ...measured extras}}
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from stalesim.errors import StalesimError
from stalesim.workloads.profile import LayerProfile, Profile

__all__ = [
    "DEFAULT_LAUNCH_OVERHEAD_S",
    "DeviceSpec",
    "Hardware",
    "LinkSpec",
    "catalog",
    "device_names",
    "get_device",
    "get_link",
    "hardware_from_catalog",
    "hardware_from_dict",
    "link_names",
    "load_hardware",
    "roofline_profile",
]

HW_SCHEMA_VERSION = 1
DEFAULT_LAUNCH_OVERHEAD_S = 5e-6
_ALGOS = ("ring", "tree")


def _finite_pos(value: Any, where: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise StalesimError(f"{where}: must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise StalesimError(f"{where}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or CPU core): peak dense FLOP/s per dtype, memory bandwidth and size."""

    name: str
    peak_flops: dict[str, float]
    mem_bandwidth_Bps: float
    memory_bytes: float
    kind: str = "gpu"  # "gpu" | "cpu"
    copy_engines: bool = True
    source: str = ""
    key: str = ""

    def flops_per_s(self, dtype: str = "float32") -> float:
        """Peak dense FLOP/s for ``dtype`` (float32 | tf32 | bfloat16 | float16)."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise StalesimError(
                f"dtype: device {self.name!r} has no peak for {dtype!r} "
                f"(known: {', '.join(self.peak_flops)})"
            ) from None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "kind": self.kind,
                "peak_flops": dict(self.peak_flops), "mem_bandwidth_Bps": self.mem_bandwidth_Bps,
                "memory_bytes": self.memory_bytes, "copy_engines": self.copy_engines,
                "source": self.source}

    @classmethod
    def from_dict(cls, d: Any, where: str = "device") -> DeviceSpec:
        if not isinstance(d, dict):
            raise StalesimError(f"{where}: must be an object or a catalog name")
        for k in ("name", "peak_flops", "mem_bandwidth_Bps", "memory_bytes"):
            if k not in d:
                raise StalesimError(f"{where}.{k}: missing")
        pf = d["peak_flops"]
        if not isinstance(pf, dict) or not pf:
            raise StalesimError(f"{where}.peak_flops: must be a non-empty object of dtype -> FLOP/s")
        peaks = {str(k): _finite_pos(v, f"{where}.peak_flops.{k}") for k, v in pf.items()}
        kind = d.get("kind", "gpu")
        if kind not in ("gpu", "cpu"):
            raise StalesimError(f"{where}.kind: expected 'gpu' or 'cpu', got {kind!r}")
        ce = d.get("copy_engines", kind == "gpu")
        if not isinstance(ce, bool):
            raise StalesimError(f"{where}.copy_engines: must be true or false, got {ce!r}")
        return cls(
            name=str(d["name"]), peak_flops=peaks,
            mem_bandwidth_Bps=_finite_pos(d["mem_bandwidth_Bps"], f"{where}.mem_bandwidth_Bps"),
            memory_bytes=_finite_pos(d["memory_bytes"], f"{where}.memory_bytes"),
            kind=kind, copy_engines=ce, source=str(d.get("source", "")), key=str(d.get("key", "")),
        )


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link, alpha-beta model: time(n) = latency_s + n / bandwidth_Bps.

    ``bandwidth_Bps`` is ``float('inf')`` for the ideal link (``null`` in JSON).
    """

    name: str
    latency_s: float
    bandwidth_Bps: float
    source: str = ""
    key: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` one way (0 bytes still pays the latency)."""
        return self.latency_s + (0.0 if math.isinf(self.bandwidth_Bps) else nbytes / self.bandwidth_Bps)

    def to_dict(self) -> dict[str, Any]:
        d = {"key": self.key, "name": self.name, "latency_s": self.latency_s,
             "bandwidth_Bps": None if math.isinf(self.bandwidth_Bps) else self.bandwidth_Bps,
             "source": self.source}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "link") -> LinkSpec:
        if not isinstance(d, dict):
            raise StalesimError(f"{where}: must be an object or a catalog name")
        for k in ("name", "latency_s", "bandwidth_Bps"):
            if k not in d:
                raise StalesimError(f"{where}.{k}: missing")
        bw_raw = d["bandwidth_Bps"]
        if bw_raw is None or (isinstance(bw_raw, float) and math.isinf(bw_raw) and bw_raw > 0):
            bw = math.inf
        else:
            bw = _finite_pos(bw_raw, f"{where}.bandwidth_Bps")
        known = {"name", "latency_s", "bandwidth_Bps", "source", "key"}
        return cls(
            name=str(d["name"]),
            latency_s=_finite_pos(d["latency_s"], f"{where}.latency_s", allow_zero=True),
            bandwidth_Bps=bw, source=str(d.get("source", "")), key=str(d.get("key", "")),
            extra={k: v for k, v in d.items() if k not in known},
        )


@dataclass(frozen=True)
class Hardware:
    """One device kind + one link kind, and how communication interacts with compute."""

    device: DeviceSpec
    link: LinkSpec
    comm_overlaps_compute: bool = True
    cpu_comm_occupancy: float = 0.0
    allreduce_algorithm: str = "ring"
    allreduce: dict[str, Any] = field(default_factory=dict)  # measured extras (calibrate)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.allreduce_algorithm not in _ALGOS:
            raise StalesimError(
                f"allreduce.algorithm: expected ring or tree, got {self.allreduce_algorithm!r}"
            )
        occ = self.cpu_comm_occupancy
        if isinstance(occ, bool) or not isinstance(occ, (int, float)) or not 0 <= occ <= 1:
            raise StalesimError(f"cpu_comm_occupancy: must be a number in [0, 1], got {occ!r}")

    def p2p_time(self, nbytes: float) -> float:
        """One point-to-point transfer (alpha + n beta)."""
        return self.link.transfer_time(nbytes)

    def allreduce_time(self, nbytes: float, workers: int) -> float:
        """All-reduce of ``nbytes`` over ``workers`` ranks with the chosen algorithm.

        ring: 2(P-1) alpha + 2 (P-1)/P n / b (reduce-scatter + all-gather);
        tree: 2 ceil(log2 P) (alpha + n / b) (reduce then broadcast, unpipelined).
        """
        p = int(workers)
        if p < 1:
            raise StalesimError(f"workers: expected an integer >= 1, got {workers!r}")
        if p == 1:
            return 0.0
        a, b = self.link.latency_s, self.link.bandwidth_Bps
        nb = 0.0 if math.isinf(b) else nbytes / b
        if self.allreduce_algorithm == "ring":
            return 2 * (p - 1) * a + 2 * (p - 1) / p * nb
        return 2 * math.ceil(math.log2(p)) * (a + nb)

    def to_dict(self) -> dict[str, Any]:
        ar = {"algorithm": self.allreduce_algorithm}
        ar.update({k: v for k, v in self.allreduce.items() if k != "algorithm"})
        d: dict[str, Any] = {
            "schema_version": HW_SCHEMA_VERSION,
            "device": self.device.to_dict(),
            "link": self.link.to_dict(),
            "comm_overlaps_compute": self.comm_overlaps_compute,
            "cpu_comm_occupancy": self.cpu_comm_occupancy,
            "allreduce": ar,
        }
        if self.meta:
            d["meta"] = dict(self.meta)
        return d


# ------------------------------------------------------------------ catalog
@lru_cache(maxsize=1)
def catalog() -> dict[str, Any]:
    """The parsed ``catalog.json`` shipped with the package."""
    text = resources.files("stalesim.workloads").joinpath("catalog.json").read_text("utf-8")
    return json.loads(text)


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def device_names() -> list[str]:
    return list(catalog()["devices"])


def link_names() -> list[str]:
    return list(catalog()["links"])


def get_device(name: str) -> DeviceSpec:
    """A catalog device by key (case, spaces, dashes ignored: ``H100 SXM`` == ``h100-sxm``)."""
    table = catalog()["devices"]
    for key, d in table.items():
        if _norm(key) == _norm(name) or _norm(d["name"]) == _norm(name):
            return DeviceSpec.from_dict({**d, "key": key}, where=f"catalog.devices.{key}")
    raise StalesimError(f"device: unknown {name!r}; known: {', '.join(table)}")


def get_link(name: str) -> LinkSpec:
    """A catalog link by key (``nvlink4``, ``pcie4-x16``, ``ideal``, ...)."""
    table = catalog()["links"]
    for key, d in table.items():
        if _norm(key) == _norm(name) or _norm(d["name"]) == _norm(name):
            return LinkSpec.from_dict({**d, "key": key}, where=f"catalog.links.{key}")
    raise StalesimError(f"link: unknown {name!r}; known: {', '.join(table)}")


def hardware_from_catalog(
    device: str,
    link: str,
    *,
    allreduce_algorithm: str = "ring",
    cpu_comm_occupancy: float | None = None,
) -> Hardware:
    """Catalog device + link. GPUs overlap comm with compute; CPUs do not (occupancy 1)."""
    dev, lnk = get_device(device), get_link(link)
    overlaps = dev.copy_engines
    occ = (0.0 if overlaps else 1.0) if cpu_comm_occupancy is None else cpu_comm_occupancy
    return Hardware(dev, lnk, comm_overlaps_compute=overlaps, cpu_comm_occupancy=occ,
                    allreduce_algorithm=allreduce_algorithm)


def hardware_from_dict(data: Any) -> Hardware:
    """Validate a parsed hardware JSON object (device/link may be catalog names)."""
    if not isinstance(data, dict):
        raise StalesimError(f"hardware: must be a JSON object, got {type(data).__name__}")
    sv = data.get("schema_version", HW_SCHEMA_VERSION)
    if sv != HW_SCHEMA_VERSION:
        raise StalesimError(f"schema_version: unsupported {sv!r} (this stalesim reads 1)")
    for k in ("device", "link"):
        if k not in data:
            raise StalesimError(f"{k}: missing")
    dev = get_device(data["device"]) if isinstance(data["device"], str) else \
        DeviceSpec.from_dict(data["device"])
    lnk = get_link(data["link"]) if isinstance(data["link"], str) else LinkSpec.from_dict(data["link"])
    overlaps = data.get("comm_overlaps_compute", dev.copy_engines)
    if not isinstance(overlaps, bool):
        raise StalesimError(f"comm_overlaps_compute: must be true or false, got {overlaps!r}")
    occ = data.get("cpu_comm_occupancy", 0.0 if overlaps else 1.0)
    ar = data.get("allreduce", {"algorithm": "ring"})
    if not isinstance(ar, dict):
        raise StalesimError("allreduce: must be an object such as {\"algorithm\": \"ring\"}")
    algo = ar.get("algorithm", "ring")
    meta = data.get("meta", {})
    return Hardware(dev, lnk, comm_overlaps_compute=overlaps, cpu_comm_occupancy=occ,
                    allreduce_algorithm=algo,
                    allreduce={k: v for k, v in ar.items() if k != "algorithm"},
                    meta=meta if isinstance(meta, dict) else {})


def load_hardware(path: str | os.PathLike[str]) -> Hardware:
    """Read and validate a hardware JSON file (StalesimError names the bad field)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise StalesimError(f"hardware {os.fspath(path)!r}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise StalesimError(
            f"hardware {os.fspath(path)!r}: not valid JSON (line {exc.lineno}: {exc.msg})"
        ) from None
    try:
        return hardware_from_dict(data)
    except StalesimError as exc:
        raise StalesimError(f"hardware {os.fspath(path)!r}: {exc}") from None


# ------------------------------------------------------------------ roofline
_ELEM = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2}


def roofline_profile(
    profile: Profile,
    device: DeviceSpec | str,
    dtype: str | None = None,
    *,
    launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S,
    efficiency: float = 1.0,
) -> Profile:
    """Estimate ``profile`` on ``device`` with a roofline model (no measurement).

    Per block and phase, time = max(FLOPs / (peak x efficiency), bytes / mem_bw)
    + ``launch_overhead_s``:

    * forward: FLOPs = ``flops``; bytes = params read + saved activations
      written + output written (``param_bytes + saved_bytes + output_bytes``);
    * backward: FLOPs = ``backward_flops`` if measured, else 2 x forward (input
      and weight gradients); bytes = params read + weight grads written
      (2 x params) + saved activations read + input gradient written
      (~ 2 x saved) + output gradient read;
    * update (SGD momentum): FLOPs ~ 4 per parameter, bytes = 5 x params
      (read w, g, m; write w, m);
    * split backward (the ``I`` and ``W`` of zero-bubble schedules): each half
      half the backward FLOPs (input and weight gradient are one GEMM each) and
      half its bytes (I reads the weights, saved activations and output
      gradient and writes the input gradient; W reads the saved activations and
      output gradient and writes the weight gradient): params + saved
      activations + half the output gradient each, plus a launch overhead each.

    Bytes scale with the element size when ``dtype`` differs from the profile's
    (float32 <-> bfloat16). Everything else (names, weight layers, byte counts
    except for the dtype scaling) is kept, so a roofline profile partitions and
    simulates like a measured one. A lower bound in spirit: real kernels rarely
    exceed ~50-70% of peak; pass ``efficiency`` to derate.
    """
    dev = get_device(device) if isinstance(device, str) else device
    dt = profile.dtype if dtype is None else dtype
    peak = dev.flops_per_s(dt) * efficiency
    if not (math.isfinite(peak) and peak > 0):
        raise StalesimError(f"efficiency: must give a positive peak, got {efficiency!r}")
    if not math.isfinite(launch_overhead_s) or launch_overhead_s < 0:
        raise StalesimError(f"launch_overhead_s: must be >= 0, got {launch_overhead_s!r}")
    bw = dev.mem_bandwidth_Bps
    src_el = _ELEM.get(profile.dtype, 4)
    dst_el = _ELEM.get(dt, 4)
    scale = dst_el / src_el

    def t(flops: float, nbytes: float) -> float:
        return max(flops / peak, nbytes / bw) + launch_overhead_s

    layers = []
    for lp in profile.layers:
        pb = lp.param_bytes * scale
        sb = lp.saved_bytes * scale
        ob = lp.output_bytes * scale
        bflops = lp.backward_flops if lp.backward_flops is not None else 2 * lp.flops
        n_params = lp.param_bytes / src_el
        layers.append(LayerProfile(
            name=lp.name,
            forward_s=t(lp.flops, pb + sb + ob),
            backward_s=t(bflops, 2 * pb + 2 * sb + ob),
            update_s=t(4 * n_params, 5 * pb) if lp.param_bytes else 0.0,
            param_bytes=round(pb),
            output_bytes=round(ob),
            saved_bytes=round(sb),
            flops=lp.flops,
            weight_layers=lp.weight_layers,
            backward_flops=bflops,
            backward_input_s=t(bflops / 2, pb + sb + ob / 2),
            backward_weight_s=t(bflops / 2, pb + sb + ob / 2),
        ))
    meta = {"roofline": {"from_device": profile.device, "to_device": dev.key or dev.name,
                         "dtype": dt, "launch_overhead_s": launch_overhead_s,
                         "efficiency": efficiency, "source": dev.source}}
    return replace(profile, device=f"{dev.key or dev.name} (roofline)", dtype=dt, layers=layers,
                   threads=None, repeats=None, warmup=None, whole_model_s=None,
                   sum_over_whole_ratio=None, by_batch_size=None, meta=meta)
