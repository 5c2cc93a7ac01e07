"""Hardware catalog, validation, collective models and the roofline what-if."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.hardware import (
    catalog,
    device_names,
    get_device,
    get_link,
    get_node,
    hardware_from_catalog,
    hardware_from_dict,
    hardware_from_node,
    load_hardware,
    node_names,
    roofline_profile,
)
from stalesim.workloads.profile import profile_from_dict, uniform_profile


def test_catalog_has_required_parts_with_sources() -> None:
    assert {"v100-sxm2", "a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm", "h200", "rtx4090",
            "cpu-core"} <= set(device_names())
    links = set(catalog()["links"])
    assert {"pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink3", "nvlink4", "10gbe", "25gbe",
            "100gbe", "ib-hdr", "ib-ndr", "gloo-loopback", "ideal"} <= links
    for section in ("devices", "links"):
        for key, entry in catalog()[section].items():
            assert len(entry["source"]) > 20, key
    h100 = get_device("H100 SXM")
    assert h100.flops_per_s("bfloat16") == pytest.approx(989.4e12)
    assert h100.mem_bandwidth_Bps == pytest.approx(3.35e12)
    assert get_device("a100-80gb-sxm").memory_bytes == 80e9
    assert get_link("PCIe 4.0 x16").bandwidth_Bps == pytest.approx(31.5e9)


def test_ideal_link_is_infinite() -> None:
    ideal = get_link("ideal")
    assert ideal.bandwidth_Bps == math.inf and ideal.latency_s == 0
    assert ideal.transfer_time(1e9) == 0.0
    hw = hardware_from_catalog("h100-sxm", "ideal")
    assert hw.allreduce_time(1e9, 8) == 0.0
    assert hw.to_dict()["link"]["bandwidth_Bps"] is None
    json.dumps(hw.to_dict(), allow_nan=False)


def test_collective_models() -> None:
    hw = hardware_from_catalog("a100-80gb-sxm", "nvlink3")
    a, b = 4e-6, 300e9
    assert hw.p2p_time(3e8) == pytest.approx(a + 1e-3)
    assert hw.allreduce_time(1e9, 4) == pytest.approx(2 * 3 * a + 2 * 3 / 4 * 1e9 / b)
    assert hw.allreduce_time(1e9, 1) == 0.0
    tree = hardware_from_catalog("a100-80gb-sxm", "nvlink3", allreduce_algorithm="tree")
    assert tree.allreduce_time(1e9, 4) == pytest.approx(2 * 2 * (a + 1e9 / b))
    assert hw.comm_overlaps_compute and hw.cpu_comm_occupancy == 0.0
    cpu = hardware_from_catalog("cpu-core", "gloo-loopback")
    assert not cpu.comm_overlaps_compute and cpu.cpu_comm_occupancy == 1.0


def test_unknown_names() -> None:
    with pytest.raises(StalesimError, match=r"device: unknown 'b200'.*h100-sxm"):
        get_device("b200")
    with pytest.raises(StalesimError, match=r"link: unknown 'wifi'.*nvlink4"):
        get_link("wifi")


def _write(tmp_path: Path, obj) -> Path:
    p = tmp_path / "hw.json"
    p.write_text(json.dumps(obj))
    return p


def test_load_hardware_round_trip_and_names(tmp_path: Path) -> None:
    hw = hardware_from_catalog("rtx4090", "pcie4-x16")
    assert load_hardware(_write(tmp_path, hw.to_dict())) == hw
    short = load_hardware(_write(tmp_path, {"device": "h200", "link": "ib-ndr"}))
    assert short.device.key == "h200" and short.link.bandwidth_Bps == 50e9


@pytest.mark.parametrize(
    "obj,pattern",
    [
        ({"device": "h200", "link": {"name": "x", "latency_s": 0, "bandwidth_Bps": 0}},
         r"link\.bandwidth_Bps: must be > 0, got 0"),
        ({"device": "h200", "link": {"name": "x", "latency_s": 0, "bandwidth_Bps": -5}},
         r"link\.bandwidth_Bps: must be > 0"),
        ({"device": "h200", "link": {"name": "x", "latency_s": -1, "bandwidth_Bps": 1}},
         r"link\.latency_s: must be >= 0"),
        ({"device": "tpu9", "link": "ideal"}, r"device: unknown 'tpu9'"),
        ({"device": "h200", "link": "carrier-pigeon"}, r"link: unknown 'carrier-pigeon'"),
        ({"link": "ideal"}, r"device: missing"),
        ({"device": "h200", "link": "ideal", "cpu_comm_occupancy": 1.5},
         r"cpu_comm_occupancy: must be a number in \[0, 1\]"),
        ({"device": "h200", "link": "ideal", "allreduce": {"algorithm": "star"}},
         r"allreduce\.algorithm: expected ring or tree"),
        ({"device": {"name": "d", "peak_flops": {"float32": 0}, "mem_bandwidth_Bps": 1,
                     "memory_bytes": 1}, "link": "ideal"}, r"device\.peak_flops\.float32"),
        ({"device": "h200", "link": "ideal", "comm_overlaps_compute": "yes"},
         r"comm_overlaps_compute: must be true or false"),
    ],
)
def test_load_hardware_validation(tmp_path: Path, obj, pattern: str) -> None:
    with pytest.raises(StalesimError, match=pattern):
        load_hardware(_write(tmp_path, obj))


def test_load_hardware_bad_json(tmp_path: Path) -> None:
    p = tmp_path / "hw.json"
    p.write_text("{nope")
    with pytest.raises(StalesimError, match="not valid JSON"):
        load_hardware(p)


def test_catalog_nodes() -> None:
    assert {"dgx-h100", "dgx-h200", "dgx-a100"} <= set(node_names())
    for key, entry in catalog()["nodes"].items():
        assert len(entry["source"]) > 40 and "datasheet" in entry["source"], key
        get_device(entry["device"])
    h100 = get_node("DGX H100")
    assert h100.node_size == 8 and h100.intra_link.bandwidth_Bps == 450e9 and h100.inter_link.bandwidth_Bps == 50e9
    assert get_node("dgx-a100").inter_link.key == "ib-hdr"
    hw = hardware_from_node("dgx-h100", inter_link="ib-hdr", allreduce_algorithm="tree")
    assert hw.device.key == "h100-sxm" and hw.link.key == "nvlink4"
    assert hw.cluster.inter_link.key == "ib-hdr" and hw.cluster.inter_algorithm == "tree"
    with pytest.raises(StalesimError, match=r"node: unknown 'dgx-b900'.*dgx-h100"):
        get_node("dgx-b900")


def test_cluster_json_round_trip_and_shortcuts(tmp_path: Path) -> None:
    hw = hardware_from_node("dgx-a100")
    assert load_hardware(_write(tmp_path, hw.to_dict())) == hw
    json.dumps(hw.to_dict(), allow_nan=False)
    by_name = hardware_from_dict({"cluster": "dgx-h100"})  # the node also names device and link
    assert by_name.device.key == "h100-sxm" and by_name.link.key == "nvlink4" and by_name.cluster.node_size == 8
    custom = hardware_from_dict({"device": "h100-sxm", "link": "pcie5-x16",
                                 "cluster": {"node_size": 4, "inter_link": "100gbe"}})
    assert custom.cluster.intra_link == custom.link  # the intra-node link defaults to the link
    assert custom.cluster.inter_link.key == "100gbe" and custom.cluster.inter_algorithm == "ring"
    tree = hardware_from_dict({"device": "h100-sxm", "link": "nvlink4", "allreduce": {"algorithm": "tree"},
                               "cluster": {"node_size": 8, "inter_link": {"name": "my net", "latency_s": 2e-6,
                                                                          "bandwidth_Bps": 1e10}}})
    assert tree.cluster.inter_algorithm == "tree" and tree.cluster.inter_link.name == "my net"
    assert tree.cluster.allreduce_time(1e9, [1, 1]) == pytest.approx(2 * (2e-6 + 0.1))


@pytest.mark.parametrize(
    "cluster,pattern",
    [
        ({"node_size": 0, "inter_link": "ib-ndr"},
         r"^hardware '.*': cluster\.node_size: expected an integer >= 1, got 0$"),
        ({"node_size": 2.5, "inter_link": "ib-ndr"}, r"cluster\.node_size: expected an integer >= 1, got 2\.5"),
        ({"inter_link": "ib-ndr"}, r"cluster\.node_size: missing"),
        ({"node_size": 8}, r"cluster\.inter_link: missing"),
        ({"node_size": 8, "inter_link": "smoke-signals"}, r"cluster\.inter_link: link: unknown 'smoke-signals'"),
        ({"node_size": 8, "inter_link": {"name": "n", "latency_s": 0, "bandwidth_Bps": 0}},
         r"cluster\.inter_link\.bandwidth_Bps: must be > 0, got 0"),
        ({"node_size": 8, "inter_link": "ib-ndr", "inter_algorithm": "mesh"},
         r"cluster\.inter_algorithm: expected ring or tree, got 'mesh'"),
        ({"node_size": 8, "inter_link": "ib-ndr", "nics": 4}, r"cluster\.nics: unknown field"),
        ("dgx-z", r"node: unknown 'dgx-z'"),
        (7, r"cluster: must be an object or a catalog node name"),
    ],
)
def test_cluster_validation(tmp_path: Path, cluster, pattern: str) -> None:
    with pytest.raises(StalesimError, match=pattern) as exc:
        load_hardware(_write(tmp_path, {"device": "h100-sxm", "link": "nvlink4", "cluster": cluster}))
    assert "\n" not in str(exc.value)


def _flops_profile(flops: list[int], saved: int = 1 << 20):
    d = uniform_profile(len(flops), 1.0, 2.0, 32, param_bytes=4000, output_bytes=1 << 16,
                        saved_bytes=saved).to_dict()
    for lp, f in zip(d["layers"], flops):
        lp["flops"] = f
    return profile_from_dict(d)


def test_roofline_values_and_monotonicity() -> None:
    prof = _flops_profile([10**9, 10**10, 10**11])
    h100 = get_device("h100-sxm")
    r = roofline_profile(prof, h100, launch_overhead_s=0.0)
    # compute-bound layer: flops / peak
    assert r.layers[2].forward_s == pytest.approx(1e11 / 67e12)
    assert r.layers[2].backward_s == pytest.approx(2e11 / 67e12)
    # more FLOPs never take less time
    f = [lp.forward_s for lp in r.layers]
    assert f == sorted(f)
    # a faster device never takes longer, layer by layer
    for slow, fast in [("v100-sxm2", "a100-80gb-sxm"), ("a100-80gb-sxm", "h100-sxm"),
                       ("cpu-core", "v100-sxm2"), ("h100-sxm", "h200")]:
        rs, rf = roofline_profile(prof, slow), roofline_profile(prof, fast)
        for a, b in zip(rs.layers, rf.layers):
            assert b.forward_s <= a.forward_s and b.backward_s <= a.backward_s
            assert b.update_s <= a.update_s
    # bfloat16 is faster than float32 on a tensor-core part, and halves bytes
    rb = roofline_profile(prof, h100, "bfloat16")
    assert rb.layers[2].forward_s < r.layers[2].forward_s
    assert rb.layers[0].param_bytes == 2000 and rb.dtype == "bfloat16"
    assert r.device == "h100-sxm (roofline)"
    # memory-bound when FLOPs are tiny: bytes / bandwidth + overhead
    tiny = _flops_profile([1], saved=10**9)
    rt = roofline_profile(tiny, h100, launch_overhead_s=5e-6)
    assert rt.layers[0].forward_s == pytest.approx((4000 + 10**9 + (1 << 16)) / 3.35e12 + 5e-6)
    with pytest.raises(StalesimError, match="dtype"):
        roofline_profile(prof, h100, "int4")


@pytest.mark.parametrize("link,pattern", [
    ({"latency_s": 1e300}, r"link\.latency_s: 1e\+300 is larger than this tool handles"),
    ({"bandwidth_Bps": 1e-300}, r"link\.bandwidth_Bps: 1e-300 is smaller than this tool handles"),
    ({"bandwidth_Bps": 10**400}, r"link\.bandwidth_Bps: must be a finite number"),
    ({"latency_s": float("nan")}, r"link\.latency_s: must be a finite number"),
])
def test_link_numbers_bounded(tmp_path: Path, link: dict, pattern: str) -> None:
    """Times derived from a link must stay finite (a 1e300 s latency overflowed the simulator)."""
    obj = {"device": "h100-sxm", "link": {"name": "l", "latency_s": 1e-6, "bandwidth_Bps": 1e9, **link}}
    with pytest.raises(StalesimError, match=pattern):
        load_hardware(_write(tmp_path, obj))


def test_truncated_or_binary_hardware_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "hw.json"
    for content, needle in [(b'{"device": "h100-sxm", "li', "not valid JSON"), (b"\xff\xfe", "not UTF-8"),
                            (b"[" * 50_000 + b"]" * 50_000, "nested too deeply")]:
        p.write_bytes(content)
        with pytest.raises(StalesimError, match=needle):
            load_hardware(p)


@pytest.mark.parametrize("name,mem_gb,key", [
    ("NVIDIA H100 80GB HBM3", 85.0, "h100-sxm"),
    ("NVIDIA H100 PCIe", 85.5, "h100-pcie"),
    ("NVIDIA H100 NVL", 100.5, "h100-nvl"),
    ("NVIDIA H100", 100.5, "h100-nvl"),  # 94 GB: the NVL part even when the name does not say
    ("NVIDIA H200", 150.1, "h200"),
    ("NVIDIA H200 NVL", 150.1, "h200-nvl"),
    ("NVIDIA A100-SXM4-40GB", 42.4, "a100-40gb-sxm"),
    ("NVIDIA A100-SXM4-80GB", 85.1, "a100-80gb-sxm"),
    ("NVIDIA A100 80GB PCIe", 85.1, "a100-80gb-pcie"),
    ("NVIDIA A100-PCIE-40GB", 42.4, "a100-40gb-sxm"),
    ("Tesla V100-SXM2-32GB", 34.1, "v100-sxm2"),
    ("NVIDIA GeForce RTX 4090", 25.3, "rtx4090"),
    ("NVIDIA GH200 480GB", 102.0, None),  # not an H200: not in the catalog
    ("NVIDIA L4", 23.8, None),
])
def test_gpu_catalog_key_by_name_and_memory(name: str, mem_gb: float, key: str | None) -> None:
    from stalesim.workloads.hardware import gpu_catalog_key

    assert gpu_catalog_key(name, mem_gb * 1e9) == key
    if key is not None:
        assert get_device(key).key == key


def test_new_catalog_parts_are_datasheet_dense_figures() -> None:
    pcie, nvl = get_device("h100-pcie"), get_device("h100-nvl")
    assert pcie.flops_per_s("float32") == 51e12 and pcie.flops_per_s("tf32") == 756e12 / 2
    assert nvl.flops_per_s("tf32") == pytest.approx(835e12 / 2) and nvl.memory_bytes == 94e9
    assert get_device("h200-nvl").mem_bandwidth_Bps == 4.8e12
    assert get_device("a100-80gb-pcie").mem_bandwidth_Bps == 1935e9


def _conv_and_linear() -> object:
    """Two blocks of 1e12 forward FLOPs: a convolution (share 1) and a linear layer (share 0)."""
    d = uniform_profile(2, 1e-3, 2e-3, 8, param_bytes=4000).to_dict()
    for lp, share in zip(d["layers"], (1.0, 0.0)):
        lp.update(flops=10**12, conv_flop_share=share)
    return profile_from_dict(d)


def test_roofline_uses_the_peak_of_the_precision_in_force() -> None:
    """torch's CUDA default (TF32 convolutions, IEEE matmuls): the conv block at the TF32
    peak, the linear block at the FP32 peak; no precision: both at FP32 (the label)."""
    from dataclasses import replace

    from stalesim.workloads.profile import Precision

    h100 = get_device("h100-sxm")
    prof = _conv_and_linear()
    ieee = roofline_profile(prof, h100, launch_overhead_s=0.0)
    assert [lp.forward_s for lp in ieee.layers] == pytest.approx([1e12 / 67e12] * 2)
    torch_default = Precision(conv_tf32=True, matmul_tf32=False)
    r = roofline_profile(prof, h100, launch_overhead_s=0.0, precision=torch_default)
    assert [lp.forward_s for lp in r.layers] == pytest.approx([1e12 / 494.7e12, 1e12 / 67e12])
    # a measured profile's own precision is used when re-timing its dtype
    measured = replace(prof, precision=torch_default)
    assert [lp.forward_s for lp in roofline_profile(measured, h100, launch_overhead_s=0.0).layers] == \
        pytest.approx([1e12 / 494.7e12, 1e12 / 67e12])
    both = roofline_profile(prof, h100, launch_overhead_s=0.0, precision=Precision(True, True))
    assert [lp.forward_s for lp in both.layers] == pytest.approx([1e12 / 494.7e12] * 2)
    ac = roofline_profile(prof, h100, launch_overhead_s=0.0, precision=Precision(autocast="bfloat16"))
    assert [lp.forward_s for lp in ac.layers] == pytest.approx([1e12 / 989.4e12] * 2)
    # unknown conv share: every FLOP at the faster peak (the time stays a lower bound)
    d = prof.to_dict()
    for lp in d["layers"]:
        del lp["conv_flop_share"]
    unknown = roofline_profile(profile_from_dict(d), h100, launch_overhead_s=0.0, precision=torch_default)
    assert [lp.forward_s for lp in unknown.layers] == pytest.approx([1e12 / 494.7e12] * 2)
    # the peaks survive re-batching (they are in the meta)
    assert r.at_batch_size(16).layers[1].forward_s == pytest.approx(2e12 / 67e12)
    assert r.at_batch_size(16).layers[0].forward_s == pytest.approx(2e12 / 494.7e12)


def test_per_op_overhead_model() -> None:
    """Eager PyTorch: a phase takes the longer of the GPU's roofline and the host's ops x
    overhead; the per-block model adds one overhead per block and phase."""
    from stalesim.workloads.hardware import DEFAULT_OP_OVERHEAD_S, EAGER_OPS_PER_WEIGHT_LAYER, eager_ops

    h100 = get_device("h100-sxm")
    d = uniform_profile(2, 1e-3, 2e-3, 8, param_bytes=4000).to_dict()
    d["layers"][0].update(flops=10**6, weight_layers=2)  # tiny: host-bound
    d["layers"][1].update(flops=10**13, weight_layers=1)  # huge: GPU-bound
    prof = profile_from_dict(d)
    assert eager_ops(prof.layers[0])["forward"] == 2 * EAGER_OPS_PER_WEIGHT_LAYER["forward"]
    r = roofline_profile(prof, h100, overhead_model="per-op")
    assert r.layers[0].forward_s == pytest.approx(2 * EAGER_OPS_PER_WEIGHT_LAYER["forward"] * DEFAULT_OP_OVERHEAD_S)
    assert r.layers[0].backward_s == pytest.approx(2 * EAGER_OPS_PER_WEIGHT_LAYER["backward"] * DEFAULT_OP_OVERHEAD_S)
    assert r.layers[1].forward_s == pytest.approx(1e13 / 67e12)  # the host hides behind the GPU
    assert r.meta["roofline"]["overhead_model"] == "per-op"
    # re-batched from the meta with the same model (the host cost does not grow with the batch)
    assert r.at_batch_size(16).layers[0].forward_s == pytest.approx(r.layers[0].forward_s)
    block = roofline_profile(prof, h100)  # default: per block, 5 us added
    assert block.layers[1].forward_s == pytest.approx(1e13 / 67e12 + 5e-6)
    with pytest.raises(StalesimError, match="overhead_model"):
        roofline_profile(prof, h100, overhead_model="per-kernel")
