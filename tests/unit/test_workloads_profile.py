"""Profile data model: JSON round trip, validation messages, batch-size scaling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.profile import (
    Profile,
    load_profile,
    profile_from_dict,
    uniform_profile,
)


def _doc(**over) -> dict:
    d = uniform_profile(4, 1e-3, 2e-3, 64, update_s=1e-4, param_bytes=1000, output_bytes=4096,
                        saved_bytes=8192).to_dict()
    d.update(over)
    return d


def test_uniform_profile_values() -> None:
    p = uniform_profile(3, 1e-3, 2e-3, 128, update_s=5e-4, param_bytes=10)
    assert p.n_layers == 3 and p.batch_size == 128
    assert p.costs() == pytest.approx([3.5e-3] * 3)
    assert p.weight_layers == [1, 1, 1]
    assert p.layers[2].name == "layer2"
    with pytest.raises(StalesimError, match="n_layers"):
        uniform_profile(0, 1e-3, 1e-3, 1)


def test_round_trip(tmp_path: Path) -> None:
    p = uniform_profile(4, 1e-3, 2e-3, 64, output_bytes=4096)
    path = tmp_path / "p.json"
    text = p.to_json(path)
    assert json.loads(text) == json.loads(path.read_text())
    q = load_profile(path)
    assert q == p
    assert Profile.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(
    "mutate,pattern",
    [
        (lambda d: d["layers"][3].__setitem__("forward_s", -1),
         r"layers\[3\]\.forward_s: must be a finite number >= 0, got -1"),
        (lambda d: d["layers"][1].__setitem__("backward_s", float("nan")),
         r"layers\[1\]\.backward_s: must be a finite number >= 0, got nan"),
        (lambda d: d["layers"][0].pop("saved_bytes"), r"layers\[0\]\.saved_bytes: missing"),
        (lambda d: d["layers"][2].__setitem__("param_bytes", "10"),
         r"layers\[2\]\.param_bytes: must be an integer >= 0, got '10'"),
        (lambda d: d["layers"][2].__setitem__("output_bytes", 1.5),
         r"layers\[2\]\.output_bytes: must be an integer"),
        (lambda d: d["layers"][0].__setitem__("update_s", True),
         r"layers\[0\]\.update_s: must be a finite number"),
        (lambda d: d.__setitem__("batch_size", 0), r"batch_size: must be an integer >= 1, got 0"),
        (lambda d: d.pop("model"), r"^model: missing"),
        (lambda d: d.__setitem__("layers", []), r"layers: must be a non-empty list"),
        (lambda d: d.__setitem__("layers", [3]), r"layers\[0\]: must be an object"),
        (lambda d: d.__setitem__("schema_version", 2), r"schema_version: unsupported 2"),
        (lambda d: d.__setitem__("dtype", 5), r"dtype: must be a non-empty string"),
    ],
)
def test_validation_names_field(mutate, pattern: str) -> None:
    d = _doc()
    mutate(d)
    with pytest.raises(StalesimError, match=pattern):
        profile_from_dict(d)


def test_load_profile_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "model": ')
    with pytest.raises(StalesimError, match=r"bad.json.*not valid JSON"):
        load_profile(bad)
    with pytest.raises(StalesimError, match="cannot read"):
        load_profile(tmp_path / "missing.json")
    d = _doc()
    d["layers"][3]["forward_s"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(StalesimError, match=r"layers\[3\]\.forward_s"):
        load_profile(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(StalesimError, match="must be a JSON object"):
        load_profile(bad)


def test_at_batch_size_linear() -> None:
    p = uniform_profile(2, 1e-3, 2e-3, 64, update_s=1e-4, param_bytes=1000, output_bytes=4096,
                        saved_bytes=8192)
    q = p.at_batch_size(128)
    lp = q.layers[0]
    assert q.batch_size == 128
    assert lp.forward_s == pytest.approx(2e-3) and lp.backward_s == pytest.approx(4e-3)
    assert lp.update_s == pytest.approx(1e-4) and lp.param_bytes == 1000  # batch-independent
    assert lp.output_bytes == 8192 and lp.saved_bytes == 16384
    assert p.at_batch_size(64) .layers == p.layers
    with pytest.raises(StalesimError, match="batch_size"):
        p.at_batch_size(0)


def test_at_batch_size_interpolates_between_points() -> None:
    d = _doc()
    small = json.loads(json.dumps(d["layers"]))
    big = json.loads(json.dumps(d["layers"]))
    for lp in big:
        lp["forward_s"] = 5e-3  # 1e-3 at 64, 5e-3 at 256: nonlinear in b overall
        lp["output_bytes"] = 4096 * 4
    d["by_batch_size"] = [{"batch_size": 64, "layers": small}, {"batch_size": 256, "layers": big}]
    p = profile_from_dict(d)
    assert p.at_batch_size(128).layers[0].forward_s == pytest.approx(1e-3 + (64 / 192) * 4e-3)
    assert p.at_batch_size(128).layers[0].output_bytes == round(4096 + 64 / 192 * 3 * 4096)
    assert p.at_batch_size(256).layers[0].forward_s == pytest.approx(5e-3)
    # outside the range: linear scaling from the nearest point
    assert p.at_batch_size(512).layers[0].forward_s == pytest.approx(10e-3)
    assert p.at_batch_size(32).layers[0].forward_s == pytest.approx(0.5e-3)
    d["by_batch_size"][1]["layers"][0]["name"] = "other"
    with pytest.raises(StalesimError, match=r"by_batch_size\[1\]\.layers: names differ"):
        profile_from_dict(d)


def test_stage_layers_aggregate() -> None:
    p = uniform_profile(4, 1e-3, 2e-3, 8, param_bytes=10, output_bytes=7, saved_bytes=3)
    s0, s1 = p.stage_layers([3])
    assert s0.forward_s == pytest.approx(3e-3) and s1.forward_s == pytest.approx(1e-3)
    assert s0.param_bytes == 30 and s0.saved_bytes == 9 and s0.output_bytes == 7
    assert s0.weight_layers == 3 and s1.weight_layers == 1
    assert math.isclose(sum(x.compute_s for x in (s0, s1)), sum(p.costs()))


def test_weight_layers_may_be_omitted_in_a_hand_written_profile() -> None:
    """Only the documented fields are needed: a layer with parameters counts as one weight
    layer in PPV numbering, a layer without (pooling, activation) as none."""
    d = _doc()
    d["layers"][1]["param_bytes"] = 0
    for lay in d["layers"]:
        lay.pop("weight_layers")
    prof = profile_from_dict(d)
    assert prof.weight_layers == [1, 0, 1, 1]
    d["layers"][2]["weight_layers"] = 2  # an explicit count still wins
    assert profile_from_dict(d).weight_layers == [1, 0, 2, 1]
    d["layers"][2]["weight_layers"] = -1
    with pytest.raises(StalesimError, match=r"layers\[2\]\.weight_layers: must be an integer >= 0"):
        profile_from_dict(d)


@pytest.mark.parametrize("change,pattern", [
    ({"layers.0.forward_s": 1e300}, r"layers\[0\]\.forward_s: 1e\+300 is larger than this tool handles"),
    ({"layers.0.backward_s": float("nan")}, r"layers\[0\]\.backward_s: must be a finite number"),
    ({"layers.0.param_bytes": 2**70}, r"layers\[0\]\.param_bytes: .* larger than"),
    ({"layers.0.flops": 10**400}, r"layers\[0\]\.flops: .* larger than"),
    ({"layers.0.output_bytes": float("inf")}, r"layers\[0\]\.output_bytes: must be an integer"),
    ({"batch_size": 2**40}, r"batch_size: .* larger than"),
    ({"threads": 10**6}, r"threads: .* larger than"),
    ({"dtype": "float8"}, r"dtype: unknown 'float8'"),
    ({"device": "quantum"}, r"device: unknown 'quantum'"),
    ({"device": "h100-sxm (roofline)"}, r"device: unknown"),  # a roofline device needs its meta
])
def test_absurd_values_and_unknown_names_refused(change: dict, pattern: str) -> None:
    """Bad-input probe: a layer time of 1e300 ended in OverflowError in the simulator; unknown
    dtype/device values were accepted."""
    d = _doc()
    for key, value in change.items():
        if key.startswith("layers.0."):
            d["layers"][0][key.split(".")[-1]] = value
        else:
            d[key] = value
    with pytest.raises(StalesimError, match=pattern):
        profile_from_dict(d)


def test_known_devices_and_dtypes_accepted() -> None:
    for device in ("cpu", "cuda", "cuda:3", "synthetic", "h100-sxm", "H100 SXM"):
        assert profile_from_dict(_doc(device=device)).device == device
    for dtype in ("float32", "float64", "bfloat16", "float16", "tf32"):
        assert profile_from_dict(_doc(dtype=dtype)).dtype == dtype
    roof = _doc(device="h100-sxm (roofline)", meta={"roofline": {}})
    assert profile_from_dict(roof).device == "h100-sxm (roofline)"


def test_split_backward_fields_round_trip_scale_and_default() -> None:
    from stalesim.workloads.profile import WEIGHT_GRAD_FRACTION, profile_from_dict

    p = uniform_profile(3, 1e-3, 2e-3, 8)
    assert not p.layers[0].measured_split
    assert p.layers[0].backward_split() == pytest.approx((2e-3 * (1 - WEIGHT_GRAD_FRACTION),
                                                          2e-3 * WEIGHT_GRAD_FRACTION))
    d = p.to_dict()
    for lp in d["layers"]:
        lp.update(backward_input_s=0.5e-3, backward_weight_s=1.7e-3)
    q = profile_from_dict(d)
    assert q.layers[1].backward_split() == (0.5e-3, 1.7e-3)
    assert q.at_batch_size(4).layers[1].backward_split() == pytest.approx((0.25e-3, 0.85e-3))
    stage = q.stage_layers([2])[0]
    assert stage.backward_split() == pytest.approx((1e-3, 3.4e-3))
    assert profile_from_dict(q.to_dict()).layers[2].backward_weight_s == 1.7e-3
    del d["layers"][0]["backward_weight_s"]
    with pytest.raises(StalesimError, match=r"layers\[0\]\.backward_weight_s: missing"):
        profile_from_dict(d)


def test_precision_round_trip_and_old_files() -> None:
    from stalesim.workloads.profile import Precision

    base = uniform_profile(2, 1e-3, 2e-3, 8).to_dict()
    assert profile_from_dict(base).precision is None  # written before the field: the dtype label
    doc = dict(base, precision={"conv_tf32": True, "matmul_tf32": False, "autocast": None})
    doc["layers"] = [dict(lp, conv_flop_share=s, flops=f)
                     for lp, s, f in zip(base["layers"], (1.0, 0.25), (100, 300))]
    p = profile_from_dict(doc)
    assert p.precision == Precision(conv_tf32=True)
    assert [lp.conv_flop_share for lp in p.layers] == [1.0, 0.25]
    assert profile_from_dict(p.to_dict()).to_dict() == p.to_dict()
    # one stage of both: the share FLOP-weighted (forward + the default 2x backward)
    assert p.stage_layers([])[0].conv_flop_share == pytest.approx((300 * 1.0 + 900 * 0.25) / 1200)
    assert p.stage_layers([1])[0].conv_flop_share == 1.0


@pytest.mark.parametrize("prec,pattern", [
    ({"conv_tf32": "yes"}, r"precision\.conv_tf32: must be true or false"),
    ({"autocast": "int8"}, r"precision\.autocast: expected null or one of"),
    ({"tf32": True}, r"precision\.tf32: unknown field"),
    ([], r"precision: must be an object"),
])
def test_bad_precision_is_one_line(prec, pattern: str) -> None:
    doc = dict(uniform_profile(1, 1e-3, 2e-3, 8).to_dict(), precision=prec)
    with pytest.raises(StalesimError, match=pattern):
        profile_from_dict(doc)


def test_conv_share_is_a_fraction() -> None:
    doc = uniform_profile(1, 1e-3, 2e-3, 8).to_dict()
    doc["layers"][0]["conv_flop_share"] = 1.5
    with pytest.raises(StalesimError, match=r"layers\[0\]\.conv_flop_share"):
        profile_from_dict(doc)
