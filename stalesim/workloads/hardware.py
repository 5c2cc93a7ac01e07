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
     "allreduce": {"algorithm": "ring" | "tree", ...measured extras},
     "cluster": "dgx-h100" | {"node_size": 8, "intra_link": "nvlink4" | {...} (default: link),
                              "inter_link": "ib-ndr" | {...}, "inter_algorithm": "ring" | "tree"}}

A **cluster** (optional) is nodes of ``node_size`` devices: ``intra_link`` between
devices of one node, ``inter_link`` between nodes (per device: one NIC per GPU,
as DGX nodes have), and the algorithm of the inter-node phase of a hierarchical
all-reduce (:meth:`ClusterSpec.allreduce_time`). Catalog nodes (``nodes`` in
``catalog.json``) name a device, a node size and both links.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, NamedTuple

from stalesim.errors import StalesimError
from stalesim.limits import MAX_BYTES, MAX_COUNT, MAX_RATE, MAX_SECONDS, MIN_RATE

if TYPE_CHECKING:  # annotations only: profile.py re-times roofline layers through this module
    from stalesim.workloads.profile import LayerProfile, Precision, Profile

__all__ = [
    "DEFAULT_LAUNCH_OVERHEAD_S",
    "DEFAULT_OP_OVERHEAD_S",
    "RooflineParams",
    "eager_ops",
    "gpu_catalog_key",
    "precision_peaks",
    "ClusterSpec",
    "DeviceSpec",
    "Hardware",
    "LinkSpec",
    "catalog",
    "device_names",
    "get_device",
    "get_link",
    "get_node",
    "hardware_from_catalog",
    "hardware_from_dict",
    "hardware_from_node",
    "link_names",
    "load_hardware",
    "roofline_layer",
    "roofline_params",
    "node_names",
    "roofline_profile",
]

HW_SCHEMA_VERSION = 1
DEFAULT_LAUNCH_OVERHEAD_S = 5e-6  # the per-block model's overhead per block and phase
_ALGOS = ("ring", "tree")


def _finite_pos(value: Any, where: str, *, allow_zero: bool = False, lo: float = 0.0,
                hi: float = MAX_RATE) -> float:
    """A finite number > 0 (>= 0 with ``allow_zero``) within ``[lo, hi]``: the bounds of
    :mod:`stalesim.limits` keep every time derived from it finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StalesimError(f"{where}: must be a finite number, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int beyond float range
        finite = False
    if not finite:
        raise StalesimError(f"{where}: must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise StalesimError(f"{where}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if value and value < lo:
        raise StalesimError(f"{where}: {value!r} is smaller than this tool handles (at least {lo:g})")
    if value > hi:
        raise StalesimError(f"{where}: {value!r} is larger than this tool handles (at most {hi:g})")
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
    # streaming multiprocessors (None: not stated): the GEMM efficiency model's wave quantization
    sm_count: int | None = None

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
                "source": self.source, **({"sm_count": self.sm_count} if self.sm_count is not None else {})}

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
        peaks = {str(k): _finite_pos(v, f"{where}.peak_flops.{k}", lo=MIN_RATE) for k, v in pf.items()}
        kind = d.get("kind", "gpu")
        if kind not in ("gpu", "cpu"):
            raise StalesimError(f"{where}.kind: expected 'gpu' or 'cpu', got {kind!r}")
        ce = d.get("copy_engines", kind == "gpu")
        if not isinstance(ce, bool):
            raise StalesimError(f"{where}.copy_engines: must be true or false, got {ce!r}")
        sms = d.get("sm_count")
        if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or sms < 1):
            raise StalesimError(f"{where}.sm_count: expected an integer >= 1 or null, got {sms!r}")
        return cls(
            name=str(d["name"]), peak_flops=peaks,
            mem_bandwidth_Bps=_finite_pos(d["mem_bandwidth_Bps"], f"{where}.mem_bandwidth_Bps", lo=MIN_RATE),
            memory_bytes=_finite_pos(d["memory_bytes"], f"{where}.memory_bytes", hi=MAX_BYTES),
            kind=kind, copy_engines=ce, source=str(d.get("source", "")), key=str(d.get("key", "")),
            sm_count=sms,
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
            bw = _finite_pos(bw_raw, f"{where}.bandwidth_Bps", lo=MIN_RATE)
        known = {"name", "latency_s", "bandwidth_Bps", "source", "key"}
        return cls(
            name=str(d["name"]),
            latency_s=_finite_pos(d["latency_s"], f"{where}.latency_s", allow_zero=True, hi=MAX_SECONDS),
            bandwidth_Bps=bw, source=str(d.get("source", "")), key=str(d.get("key", "")),
            extra={k: v for k, v in d.items() if k not in known},
        )


def _int_at_least(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise StalesimError(f"{where}: expected an integer >= {low}, got {value!r}")
    if value > MAX_COUNT:
        raise StalesimError(f"{where}: {value} is larger than this tool handles (at most {MAX_COUNT:,})")
    return value


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes of ``node_size`` devices joined by a network (the hierarchy a cluster has).

    ``intra_link``: between two devices of one node (NVLink through NVSwitch: every
    pair at the per-device bandwidth, no contention between pairs). ``inter_link``:
    between devices of different nodes, per device (one NIC per GPU on a
    non-blocking fabric, as DGX nodes with rail-optimised InfiniBand have).
    ``inter_algorithm``: ``ring`` or ``tree`` for the inter-node phase of the
    hierarchical all-reduce (:meth:`allreduce_time`).
    """

    node_size: int
    intra_link: LinkSpec
    inter_link: LinkSpec
    inter_algorithm: str = "ring"
    name: str = ""
    source: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        _int_at_least(self.node_size, "cluster.node_size", 1)
        if self.inter_algorithm not in _ALGOS:
            raise StalesimError(
                f"cluster.inter_algorithm: expected ring or tree, got {self.inter_algorithm!r}")

    def allreduce_time(self, nbytes: float, per_node: Sequence[int]) -> float:
        """Hierarchical all-reduce of ``nbytes`` over a group with ``per_node[i]`` members
        on its i-th node (seconds).

        Reduce-scatter inside each node (ring over the k local members), all-reduce of
        each 1/k shard across the m nodes (k shards in parallel, each over its own
        device's NIC; ``inter_algorithm``), all-gather inside the node:
        ``2(k-1) a_i + 2(k-1)/k n b_i + inter(m, n/k)`` with ring
        ``inter = 2(m-1) a_e + 2(m-1)/m (n/k) b_e`` or tree
        ``2 ceil(log2 m)(a_e + (n/k) b_e)``. Uneven groups take k = the largest node
        share for the intra phase and the smallest for the shard size (conservative).
        One node: the flat ring. One member per node: the flat inter-node collective.
        """
        counts = [int(c) for c in per_node if c > 0]
        if sum(counts) <= 1:
            return 0.0
        k, k_min, m = max(counts), min(counts), len(counts)
        t = 0.0
        if k > 1:
            a, b = self.intra_link.latency_s, self.intra_link.bandwidth_Bps
            t += 2 * (k - 1) * a + (0.0 if math.isinf(b) else 2 * (k - 1) / k * nbytes / b)
        if m > 1:
            a, b = self.inter_link.latency_s, self.inter_link.bandwidth_Bps
            nb = 0.0 if math.isinf(b) else nbytes / k_min / b
            if self.inter_algorithm == "ring":
                t += 2 * (m - 1) * a + 2 * (m - 1) / m * nb
            else:
                t += 2 * math.ceil(math.log2(m)) * (a + nb)
        return t

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "node_size": self.node_size,
                "intra_link": self.intra_link.to_dict(), "inter_link": self.inter_link.to_dict(),
                "inter_algorithm": self.inter_algorithm, "source": self.source}

    @classmethod
    def from_dict(cls, d: Any, *, intra_default: LinkSpec | None = None, algorithm: str = "ring",
                  where: str = "cluster") -> ClusterSpec:
        """From a JSON object (links may be catalog names; ``intra_link`` defaults to
        ``intra_default``, the hardware's own link) or a catalog node name."""
        if isinstance(d, str):
            node = get_node(d)
            return replace(node, inter_algorithm=algorithm) if algorithm != node.inter_algorithm else node
        if not isinstance(d, dict):
            raise StalesimError(f"{where}: must be an object or a catalog node name")
        known = {"node_size", "intra_link", "inter_link", "inter_algorithm", "name", "source", "key"}
        extra = sorted(set(d) - known)
        if extra:
            raise StalesimError(f"{where}.{extra[0]}: unknown field (known: {', '.join(sorted(known))})")
        if "node_size" not in d:
            raise StalesimError(f"{where}.node_size: missing")
        if "inter_link" not in d:
            raise StalesimError(f"{where}.inter_link: missing")
        intra_raw = d.get("intra_link")
        if intra_raw is None:
            if intra_default is None:
                raise StalesimError(f"{where}.intra_link: missing")
            intra = intra_default
        else:
            intra = _link_of(intra_raw, f"{where}.intra_link")
        return cls(node_size=_int_at_least(d["node_size"], f"{where}.node_size", 1),
                   intra_link=intra, inter_link=_link_of(d["inter_link"], f"{where}.inter_link"),
                   inter_algorithm=d.get("inter_algorithm", algorithm), name=str(d.get("name", "")),
                   source=str(d.get("source", "")), key=str(d.get("key", "")))


def _link_of(raw: Any, where: str) -> LinkSpec:
    if isinstance(raw, str):
        try:
            return get_link(raw)
        except StalesimError as exc:
            raise StalesimError(f"{where}: {exc}") from None
    return LinkSpec.from_dict(raw, where=where)


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
    cluster: ClusterSpec | None = None  # nodes and the network between them (None: one node)

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
        if self.cluster is not None:
            d["cluster"] = self.cluster.to_dict()
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


def node_names() -> list[str]:
    return list(catalog().get("nodes", {}))


def get_node(name: str) -> ClusterSpec:
    """A catalog node (``dgx-h100``, ...) as a :class:`ClusterSpec`; its device is
    ``catalog()["nodes"][key]["device"]``."""
    table = catalog().get("nodes", {})
    for key, d in table.items():
        if _norm(key) == _norm(name) or _norm(d["name"]) == _norm(name):
            fields = {k: v for k, v in d.items() if k != "device"}
            return ClusterSpec.from_dict({**fields, "key": key}, where=f"catalog.nodes.{key}")
    raise StalesimError(f"node: unknown {name!r}; known: {', '.join(table)}")


def hardware_from_node(node: str, *, inter_link: str | None = None, allreduce_algorithm: str = "ring",
                       device: str | None = None) -> Hardware:
    """A catalog node: its device, its intra-node link as ``link``, and the cluster
    (``inter_link`` overrides the node's network)."""
    spec = get_node(node)
    entry = catalog()["nodes"][spec.key]
    if inter_link is not None:
        spec = replace(spec, inter_link=get_link(inter_link))
    spec = replace(spec, inter_algorithm=allreduce_algorithm)
    hw = hardware_from_catalog(device or entry["device"], spec.intra_link.key,
                               allreduce_algorithm=allreduce_algorithm)
    return replace(hw, cluster=spec)


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
    if isinstance(data.get("cluster"), str):  # a catalog node also names the device and the link
        entry = catalog()["nodes"][get_node(data["cluster"]).key]
        data = {"device": entry["device"], "link": entry["intra_link"], **data}
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
    if algo not in _ALGOS:
        raise StalesimError(f"allreduce.algorithm: expected ring or tree, got {algo!r}")
    cluster = None
    if data.get("cluster") is not None:
        cluster = ClusterSpec.from_dict(data["cluster"], intra_default=lnk, algorithm=algo)
    return Hardware(dev, lnk, comm_overlaps_compute=overlaps, cpu_comm_occupancy=occ,
                    allreduce_algorithm=algo,
                    allreduce={k: v for k, v in ar.items() if k != "algorithm"},
                    meta=meta if isinstance(meta, dict) else {}, cluster=cluster)


def load_hardware(path: str | os.PathLike[str]) -> Hardware:
    """Read and validate a hardware JSON file (StalesimError names the bad field)."""
    from stalesim.workloads.jsondoc import read_json

    data = read_json(path, "hardware")
    try:
        return hardware_from_dict(data)
    except StalesimError as exc:
        raise StalesimError(f"hardware {os.fspath(path)!r}: {exc}") from None


# ------------------------------------------------------------------ GPU names
def gpu_catalog_key(name: str, total_memory_bytes: float) -> str | None:
    """The catalog device of a GPU from ``torch.cuda.get_device_name`` and its total memory
    (``get_device_properties(i).total_memory``), or None for a part the catalog lacks.

    One name covers several parts with different peaks and bandwidths, so the variant is
    read from the name and, where the name does not say, from the memory size: H100
    ``PCIe`` / ``NVL`` (94 GB; torch may report it without "NVL") / SXM (the "80GB HBM3"
    name), H200 NVL / SXM, A100 80 GB (over 50 GB) vs 40 GB and its PCIe 80 GB card. A
    GH200 (an H100 with 96/144 GB) is not in the catalog: None. The A100 40 GB PCIe card
    has the 40 GB SXM part's peaks and 1,555 GB/s, so it maps there; a V100 maps to the
    SXM2 part (the PCIe card's FP32 peak is ~10 % lower).
    """
    n = str(name).lower()
    gb = float(total_memory_bytes) / 1e9
    if "gh200" in n or "gb200" in n:
        return None
    if "h200" in n:
        return "h200-nvl" if "nvl" in n else "h200"
    if "h100" in n:
        if "nvl" in n or gb > 90:
            return "h100-nvl"
        return "h100-pcie" if "pcie" in n else "h100-sxm"
    if "a100" in n:
        if gb > 50:
            return "a100-80gb-pcie" if "pcie" in n else "a100-80gb-sxm"
        return "a100-40gb-sxm"
    if "v100" in n:
        return "v100-sxm2"
    if "4090" in n:
        return "rtx4090"
    return None


# ------------------------------------------------------------------ roofline
_ELEM = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2}
OVERHEAD_MODELS = ("per-block", "per-op")
# per-op model: host cost of one eager PyTorch op on a fast GPU. Each op goes Python ->
# autograd/ATen dispatch -> library algorithm choice -> cudaLaunchKernel before the GPU sees
# it: ~5-25 us per kernel-launching op on an H100 (J. Lin, "From PyTorch op to kernel
# launch", the dispatch-chain table); H. He, "Making Deep Learning Go Brrrr From First
# Principles" (2022, "Overhead") on why small CIFAR kernels are overhead-bound. The op
# counts below include the cheap metadata ops (detach, view, t, empty: dispatch, no
# launch), so the charge per op is the low end, 5 us.
DEFAULT_OP_OVERHEAD_S = 5e-6
# eager ops one weight layer (conv/linear with its norm and activation) dispatches per phase,
# counted with a TorchDispatchMode over one training step of resnet20/56, vgg16 and alexnet
# (torch 2.14, CPU; the op sequence does not depend on the device): forward 3.6-6.7 per
# weight layer (conv, batch norm, its num_batches_tracked add_, ReLU, residual add, detach),
# backward 7.8-8.4 (ReLU, norm and conv backward, gradient adds, detaches). The split
# backward's I and W re-walk the graph: each more than half. A block without weights
# (pooling, flatten) counts as one layer. update: the optimizer's few foreach launches per
# step spread over its blocks (one each).
EAGER_OPS_PER_WEIGHT_LAYER = {"forward": 6, "backward": 8, "backward_input": 5, "backward_weight": 4}
EAGER_UPDATE_OPS_PER_BLOCK = 1


class RooflineParams(NamedTuple):
    """What turns a block's counts into roofline times (stored in a roofline profile's meta)."""

    peak_flops_per_s: float  # FLOPs not in convolutions (matmuls, attention)
    mem_bandwidth_Bps: float
    overhead_s: float  # per block and phase ("per-block") or per eager op ("per-op")
    element_bytes: int
    conv_peak_flops_per_s: float  # FLOPs in convolutions
    overhead_model: str = "per-block"

    def compute_s(self, flops: float, conv_share: float | None) -> float:
        """Seconds of ``flops`` at the peaks; without a conv share (profiles that predate it) all
        of them at the faster peak, so the time stays a lower bound."""
        if conv_share is None:
            return flops / max(self.peak_flops_per_s, self.conv_peak_flops_per_s)
        return flops * conv_share / self.conv_peak_flops_per_s + flops * (1 - conv_share) / self.peak_flops_per_s


def precision_peaks(dev: DeviceSpec, dtype: str, precision: Precision | None) -> tuple[float, float]:
    """(matmul peak, conv peak) FLOP/s for ``dtype`` under ``precision``.

    float32 with TF32 allowed runs on the TF32 tensor-core peak (conv and matmul each by
    its own flag: torch's CUDA default is TF32 convolutions, IEEE matmuls); autocast
    runs both at the autocast dtype's peak; no precision: the dtype label (IEEE)."""
    base = dev.flops_per_s(dtype)
    if precision is None:
        return base, base
    if precision.autocast is not None:
        ac = dev.flops_per_s(precision.autocast)
        return ac, ac
    if dtype != "float32":
        return base, base
    tf32 = dev.flops_per_s("tf32")
    return (tf32 if precision.matmul_tf32 else base), (tf32 if precision.conv_tf32 else base)


def roofline_profile(
    profile: Profile,
    device: DeviceSpec | str,
    dtype: str | None = None,
    *,
    launch_overhead_s: float | None = None,
    efficiency: float = 1.0,
    precision: Precision | None = None,
    overhead_model: str = "per-block",
) -> Profile:
    """Estimate ``profile`` on ``device`` with a roofline model (no measurement).

    Per block and phase, compute = FLOPs / (peak x efficiency), with each FLOP at its
    peak (:func:`precision_peaks`: ``precision``, default the profile's own when
    ``dtype`` is its dtype; convolution FLOPs by the layer's ``conv_flop_share``), and
    memory = bytes / mem_bw. ``overhead_model``:

    * ``per-block`` (default; what the figures use): max(compute, memory) +
      ``launch_overhead_s`` (default :data:`DEFAULT_LAUNCH_OVERHEAD_S`) once per block
      and phase;
    * ``per-op``: max(compute, memory, ops x ``launch_overhead_s``) (default
      :data:`DEFAULT_OP_OVERHEAD_S` per op) with the eager ops of the block
      (:func:`eager_ops`): the host enqueues kernels while the GPU runs earlier ones,
      so a phase takes the longer of the two, and each is a lower bound of it. Eager
      PyTorch on small kernels is host-bound: this is the model for a real run's time.

    Counts per phase:

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
      activations + half the output gradient each, plus its own overhead.

    Bytes scale with the element size when ``dtype`` differs from the profile's
    (float32 <-> bfloat16). Everything else (names, weight layers, byte counts
    except for the dtype scaling) is kept, so a roofline profile partitions and
    simulates like a measured one. A lower bound in spirit: real kernels rarely
    exceed ~50-70% of peak; pass ``efficiency`` to derate.
    """
    dev = get_device(device) if isinstance(device, str) else device
    dt = profile.dtype if dtype is None else dtype
    if precision is None and dt == profile.dtype:
        precision = profile.precision  # what the measured math was, when re-timing the same dtype
    params = _checked_roofline_params(dev, dt, precision, launch_overhead_s, efficiency, overhead_model)
    scale = params.element_bytes / _ELEM.get(profile.dtype, 4)
    layers = [_roofline_rescaled(lp, params, scale) for lp in profile.layers]
    # the parameters let ``Profile.at_batch_size`` re-time the counts at any batch size (a
    # roofline is a function of FLOPs and bytes, not a measurement)
    meta = {"roofline": {"from_device": profile.device, "to_device": dev.key or dev.name,
                         "dtype": dt, "launch_overhead_s": params.overhead_s,
                         "overhead_model": overhead_model,
                         "efficiency": efficiency, "source": dev.source,
                         "peak_flops_per_s": params.peak_flops_per_s,
                         "conv_peak_flops_per_s": params.conv_peak_flops_per_s,
                         "mem_bandwidth_Bps": params.mem_bandwidth_Bps,
                         "element_bytes": params.element_bytes,
                         "precision": None if precision is None else precision.to_dict()}}
    return replace(profile, device=f"{dev.key or dev.name} (roofline)", dtype=dt, layers=layers,
                   threads=None, repeats=None, warmup=None, whole_model_s=None,
                   sum_over_whole_ratio=None, by_batch_size=None, meta=meta, precision=precision)


def _checked_roofline_params(dev: DeviceSpec, dtype: str, precision: Precision | None,
                             launch_overhead_s: float | None, efficiency: float,
                             overhead_model: str) -> RooflineParams:
    """:func:`roofline_profile`'s arguments, checked, as the parameters of its roofline (the
    overhead's default depends on the model: a launch per block and phase, or per op)."""
    if overhead_model not in OVERHEAD_MODELS:
        raise StalesimError(f"overhead_model: expected one of {', '.join(OVERHEAD_MODELS)}, got {overhead_model!r}")
    if launch_overhead_s is None:
        launch_overhead_s = DEFAULT_OP_OVERHEAD_S if overhead_model == "per-op" else DEFAULT_LAUNCH_OVERHEAD_S
    matmul_peak, conv_peak = precision_peaks(dev, dtype, precision)
    peak, cpeak = matmul_peak * efficiency, conv_peak * efficiency
    if not (math.isfinite(peak) and peak > 0 and math.isfinite(cpeak) and cpeak > 0):
        raise StalesimError(f"efficiency: must give a positive peak, got {efficiency!r}")
    if not math.isfinite(launch_overhead_s) or launch_overhead_s < 0:
        raise StalesimError(f"launch_overhead_s: must be >= 0, got {launch_overhead_s!r}")
    return RooflineParams(peak, dev.mem_bandwidth_Bps, launch_overhead_s, _ELEM.get(dtype, 4), cpeak,
                          overhead_model)


def _roofline_rescaled(lp: LayerProfile, params: RooflineParams, scale: float) -> LayerProfile:
    """One block's roofline estimate, its byte counts scaled by ``scale`` (the element size
    ratio) first: rounded in the block, exact for the times."""
    in_dtype = replace(lp, param_bytes=round(lp.param_bytes * scale),
                       output_bytes=round(lp.output_bytes * scale),
                       saved_bytes=round(lp.saved_bytes * scale), spread=None)
    return roofline_layer(in_dtype, params,
                          exact_bytes=(lp.param_bytes * scale, lp.output_bytes * scale,
                                       lp.saved_bytes * scale))


def eager_ops(lp: LayerProfile) -> dict[str, int]:
    """Eager PyTorch ops of one block per phase (``forward``, ``backward``, ``update``,
    ``backward_input``, ``backward_weight``): :data:`EAGER_OPS_PER_WEIGHT_LAYER` per
    weight layer (one weightless layer for a block without), the update's
    :data:`EAGER_UPDATE_OPS_PER_BLOCK` for a block with parameters."""
    wl = max(1, lp.weight_layers)
    ops = {phase: n * wl for phase, n in EAGER_OPS_PER_WEIGHT_LAYER.items()}
    ops["update"] = EAGER_UPDATE_OPS_PER_BLOCK if lp.param_bytes else 0
    return ops


def roofline_layer(lp: LayerProfile, params: RooflineParams,
                   exact_bytes: tuple[float, float, float] | None = None) -> LayerProfile:
    """One block's forward/backward/update seconds by the roofline (see :func:`roofline_profile`).

    The single place the roofline turns counts into times: ``roofline_profile``
    calls it at the profile's batch size and ``Profile.at_batch_size`` at any
    other (counts scaled first), so a roofline estimate never depends on the
    order of "re-time" and "re-batch" (scaling a roofline profile's *times*
    would multiply the launch overhead by the batch ratio).
    ``exact_bytes`` = unrounded (param, output, saved) bytes when known.
    """
    pb, ob, sb = exact_bytes if exact_bytes is not None else (
        lp.param_bytes, lp.output_bytes, lp.saved_bytes)
    bw = params.mem_bandwidth_Bps
    share = lp.conv_flop_share
    ops = eager_ops(lp)
    per_op = params.overhead_model == "per-op"

    def t(phase: str, flops: float, nbytes: float, conv_share: float | None = share) -> float:
        device_s = max(params.compute_s(flops, conv_share), nbytes / bw)
        if per_op:
            return max(device_s, ops[phase] * params.overhead_s)
        return device_s + params.overhead_s

    bflops = lp.backward_flops if lp.backward_flops is not None else 2 * lp.flops
    n_params = pb / params.element_bytes
    return replace(
        lp,
        forward_s=t("forward", lp.flops, pb + sb + ob),
        backward_s=t("backward", bflops, 2 * pb + 2 * sb + ob),
        # the optimizer's arithmetic is elementwise: its FLOPs at the IEEE (non-conv) peak
        update_s=t("update", 4 * n_params, 5 * pb, 0.0) if lp.param_bytes else 0.0,
        backward_flops=bflops,
        # the split backward's halves (I, W): half the FLOPs and half the output gradient each
        backward_input_s=t("backward_input", bflops / 2, pb + sb + ob / 2),
        backward_weight_s=t("backward_weight", bflops / 2, pb + sb + ob / 2),
        spread=None,
    )


def roofline_params(meta: Any) -> RooflineParams | None:
    """The :class:`RooflineParams` of a roofline profile's ``meta``, or None when the profile
    is not a roofline estimate (or predates these fields and names no catalog device).
    Files written before the conv peak and the overhead model: one peak, per-block."""
    rf = meta.get("roofline") if isinstance(meta, dict) else None
    if not isinstance(rf, dict):
        return None
    dt = str(rf.get("dtype", "float32"))
    el = int(rf.get("element_bytes", _ELEM.get(dt, 4)))
    ovh = float(rf.get("launch_overhead_s", DEFAULT_LAUNCH_OVERHEAD_S))
    model = str(rf.get("overhead_model", "per-block"))
    if model not in OVERHEAD_MODELS:
        return None
    peak_bw = _roofline_peak_bandwidth(rf, dt)
    if peak_bw is None:
        return None
    peak, bw = peak_bw
    cpeak = rf.get("conv_peak_flops_per_s", peak)
    return RooflineParams(peak, bw, ovh, el, float(cpeak), model)


def _roofline_peak_bandwidth(rf: dict[str, Any], dtype: str) -> tuple[float, float] | None:
    """The peak FLOP/s and memory bandwidth a roofline meta stored; for files that predate
    them, its catalog device's (None: it names none)."""
    peak, bw = rf.get("peak_flops_per_s"), rf.get("mem_bandwidth_Bps")
    if peak is not None and bw is not None:
        return float(peak), float(bw)
    try:
        dev = get_device(str(rf.get("to_device")))
    except StalesimError:
        return None
    return dev.flops_per_s(dtype) * float(rf.get("efficiency", 1.0)), float(dev.mem_bandwidth_Bps)
