"""Batch-size scaling of profiles: the extrapolation rules, their provenance, the roofline."""

from __future__ import annotations

import random

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.hardware import get_device, roofline_params, roofline_profile
from stalesim.workloads.profile import Profile, profile_from_dict, uniform_profile
from stalesim.workloads.scaling import classify, worst_source


def _layer(fwd_ms: float, *, bwd_ms: float | None = None, out: int = 100, upd_ms: float = 0.5) -> dict:
    return {"name": "l0", "forward_s": fwd_ms * 1e-3,
            "backward_s": (2 * fwd_ms if bwd_ms is None else bwd_ms) * 1e-3,
            "update_s": upd_ms * 1e-3, "param_bytes": 1000, "output_bytes": out, "saved_bytes": 2 * out,
            "flops": 10 * out, "weight_layers": 1}


def _profile(points: dict[int, float], **kw) -> Profile:
    """One layer; forward ms per measured batch size (backward = 2 x forward)."""
    sizes = list(points)
    by = [{"batch_size": b, "layers": [_layer(points[b], out=100 * b, **kw)],
           "whole_model_s": 3 * points[b] * 1e-3} for b in sizes]
    d = {"schema_version": 1, "model": "m", "device": "cpu", "dtype": "float32",
         "batch_size": sizes[0], "layers": by[0]["layers"], "whole_model_s": by[0]["whole_model_s"]}
    if len(sizes) > 1:
        d["by_batch_size"] = by
    return profile_from_dict(d)


# forward 10 / 16 / 40 ms at batch 8 / 16 / 32: per sample 1.25 / 1.0 / 1.25 ms.
# The line through (8, 10) and (16, 16) meets b = 0 at 4 ms: a per-call overhead.
OVERHEAD = {8: 10.0, 16: 16.0, 32: 40.0}
# 6 / 16 ms at 8 / 16: per sample 0.75 then 1.0 (a CPU whose cache favours small batches);
# the line meets b = 0 at -4 ms, below zero
CACHE = {8: 6.0, 16: 16.0}


def fwd_ms(p: Profile, b: int) -> float:
    return p.at_batch_size(b).layers[0].forward_s * 1e3


def test_measured_and_interpolated_values() -> None:
    p = _profile(OVERHEAD)
    assert fwd_ms(p, 16) == pytest.approx(16.0)
    assert fwd_ms(p, 24) == pytest.approx(28.0)  # halfway between 16 and 40
    q = p.at_batch_size(24).layers[0]
    assert q.output_bytes == 2400 and q.backward_s == pytest.approx(56e-3)
    assert p.cost_source(16).source == "measured"
    cs = p.cost_source(24)
    assert cs.source == "interpolated" and cs.measured == (8, 16, 32) and cs.rule is None


def test_conservative_below_keeps_the_measured_overhead() -> None:
    p = _profile(OVERHEAD)
    # proportional 10 * 4/8 = 5 ms; line 10 - 0.75 * 4 = 7 ms: the overhead makes it dearer
    assert fwd_ms(p, 4) == pytest.approx(7.0)
    assert fwd_ms(p, 1) == pytest.approx(4.75)
    # never more than the smallest measured batch takes
    cs = p.cost_source(4)
    assert cs.source == "extrapolated" and cs.rule == "conservative"
    assert cs.measured_range == (8, 32) and "below" in cs.basis


def test_conservative_below_never_cheaper_per_sample_than_any_measured_batch() -> None:
    p = _profile(CACHE)
    # the line would give 6 - 1.25 * 4 = 1 ms (0.25 ms/sample, 3x better than measured);
    # batch 8's 0.75 ms/sample would still beat batch 16's 1.0 (a split of 16 into 4 x 4 would
    # look super-linear from extrapolation alone); conservative takes the highest measured
    # per-sample cost, batch 16's: 4 ms
    assert fwd_ms(p, 4) == pytest.approx(4.0)
    assert fwd_ms(p, 7) == pytest.approx(6.0)  # 7 ms capped at batch 8's measured time
    assert fwd_ms(p.with_extrapolation("trend"), 4) == pytest.approx(1.0)
    assert fwd_ms(p.with_extrapolation("trend"), 2) == pytest.approx(0.0)  # clipped at zero
    assert "highest per-sample cost of any measured batch" in p.cost_source(4).basis


def test_conservative_above_uses_the_best_measured_per_sample_cost() -> None:
    p = _profile(OVERHEAD)
    # best per sample: batch 16 (1.0 ms); proportional from 32 would say 80 ms at 64
    assert fwd_ms(p, 64) == pytest.approx(64.0)
    assert p.at_batch_size(64).layers[0].backward_s == pytest.approx(128e-3)
    # just above the range time stays at the largest measured batch's (never decreasing)
    assert fwd_ms(p, 33) == pytest.approx(40.0)
    assert fwd_ms(p, 40) == pytest.approx(40.0)
    assert fwd_ms(p, 41) == pytest.approx(41.0)
    # the trend rule extends the line through 16 and 32 (slope 1.5 ms/sample)
    assert fwd_ms(p.with_extrapolation("trend"), 64) == pytest.approx(88.0)
    cs = p.cost_source(64)
    assert cs.source == "extrapolated" and "above" in cs.basis and "lowest per-sample" in cs.basis
    # counts are exact: proportional from the nearest measured batch
    q = p.at_batch_size(64).layers[0]
    assert q.output_bytes == 6400 and q.saved_bytes == 12800 and q.flops == 64000
    assert q.update_s == pytest.approx(0.5e-3) and q.param_bytes == 1000
    assert p.at_batch_size(64).whole_model_s == pytest.approx(3 * 64e-3)


def test_trend_above_keeps_time_non_decreasing() -> None:
    p = _profile({8: 10.0, 16: 9.0})  # noisy: larger batch measured faster
    assert fwd_ms(p.with_extrapolation("trend"), 32) == pytest.approx(9.0)
    assert fwd_ms(p, 32) == pytest.approx(18.0)  # conservative: 16's 0.5625 ms/sample x 32


def test_single_measured_batch_is_proportional_both_ways() -> None:
    p = uniform_profile(2, 1e-3, 2e-3, 64, update_s=1e-4, output_bytes=4096)
    for rule in ("conservative", "trend"):
        q = p.with_extrapolation(rule)
        assert q.at_batch_size(16).layers[0].forward_s == pytest.approx(0.25e-3)
        assert q.at_batch_size(256).layers[0].backward_s == pytest.approx(8e-3)
    cs = p.cost_source(16)
    assert cs.source == "extrapolated" and cs.measured == (64,) and "only measured" in cs.basis


def test_scaled_profile_remembers_what_was_measured() -> None:
    p = uniform_profile(2, 1e-3, 2e-3, 8)
    q = p.at_batch_size(128)
    assert q.batch_size == 128 and q.measured_batch_sizes == [8]
    assert q.cost_source(128).source == "extrapolated"
    assert q.at_batch_size(8).layers[0].forward_s == pytest.approx(1e-3)
    r = profile_from_dict(q.to_dict())  # through JSON too
    assert r.cost_source(128).source == "extrapolated" and r.cost_source(8).source == "measured"


def test_bad_rule_names_the_field() -> None:
    p = uniform_profile(1, 1e-3, 1e-3, 8)
    with pytest.raises(StalesimError, match="^extrapolate: expected one of conservative, trend"):
        p.with_extrapolation("linear")
    with pytest.raises(StalesimError, match="batch_size"):
        p.cost_source(0)


def test_conservative_bounds_on_random_profiles() -> None:
    """Below: per-sample >= the highest measured one (unless capped at the smallest batch's
    time). Above: per-sample between the lowest measured one and the largest batch's, time
    non-decreasing. So a split into smaller batches never looks cheaper per sample than a
    bigger batch when either is extrapolated."""
    rng = random.Random(0)
    for _ in range(200):
        sizes = sorted(rng.sample([2, 4, 8, 16, 32, 64, 128], rng.randint(2, 4)))
        pts = {b: rng.uniform(0.2, 3.0) * b + rng.uniform(-0.2, 5.0) for b in sizes}
        pts = {b: max(0.01, t) for b, t in pts.items()}
        p = _profile(pts)
        lo, hi = sizes[0], sizes[-1]
        best = min(pts[b] / b for b in sizes)
        worst = max(pts[b] / b for b in sizes)
        prev = 0.0
        for b in range(1, 2 * hi + 1):
            t = fwd_ms(p, b)
            assert t >= prev - 1e-9 or lo <= b <= hi  # monotone outside the range
            if b < lo:
                assert t / b >= min(worst, pts[lo] / b) - 1e-9 and t <= pts[lo] + 1e-9
            if b > hi:
                assert best - 1e-9 <= t / b <= max(pts[hi] / hi, best) + 1e-9 and t >= pts[hi] - 1e-9
            prev = t


def test_classify_and_worst_source() -> None:
    assert classify([8, 32], 16, "conservative").basis == "interpolated between batches 8 and 32"
    assert classify([8], 8, "trend").source == "measured"
    assert classify([8], 4, "trend", roofline=True).source == "roofline"
    assert worst_source(["measured", "extrapolated", "interpolated"]) == "extrapolated"
    assert worst_source(["measured", "roofline"]) == "roofline"
    assert worst_source([]) == "given"


# ------------------------------------------------------------------ roofline
def _shape(b: int = 8) -> Profile:
    d = uniform_profile(3, 1e-3, 2e-3, b, update_s=1e-4, param_bytes=4_000_000,
                        output_bytes=64 * 1024 * b, saved_bytes=128 * 1024 * b).to_dict()
    for lp in d["layers"]:
        lp["flops"] = 2_000_000 * b
    return profile_from_dict(d)


def test_roofline_retimes_counts_at_any_batch_size() -> None:
    """Regression: re-batching a roofline profile scaled its launch overhead with the batch."""
    shape = _shape(8)
    r8 = roofline_profile(shape, "h100-sxm")
    a = r8.at_batch_size(128)  # what the CLI does (roofline, then simulate at 128)
    b = roofline_profile(shape.at_batch_size(128), "h100-sxm")  # what the figure code does
    for x, y in zip(a.layers, b.layers):
        assert x.forward_s == pytest.approx(y.forward_s, rel=1e-9)
        assert x.backward_s == pytest.approx(y.backward_s, rel=1e-9)
        assert x.update_s == pytest.approx(y.update_s, rel=1e-9)
    dev = get_device("h100-sxm")
    lp = a.layers[0]
    want = max(16 * 2_000_000 * 8 / dev.flops_per_s("float32"),
               (4_000_000 + 16 * 8 * (128 + 64) * 1024) / dev.mem_bandwidth_Bps) + 5e-6
    assert lp.forward_s == pytest.approx(want, rel=1e-9)  # one launch overhead, not 16
    assert a.cost_source(128).source == "roofline" and a.measured_batch_sizes == []


def test_roofline_params_from_older_files_use_the_catalog() -> None:
    r = roofline_profile(_shape(), "a100-40gb-sxm")
    meta = {"roofline": {k: v for k, v in r.meta["roofline"].items()
                         if k not in ("peak_flops_per_s", "mem_bandwidth_Bps", "element_bytes")}}
    assert roofline_params(meta) == pytest.approx(roofline_params(r.meta))
    meta["roofline"]["to_device"] = "no-such-gpu"
    assert roofline_params(meta) is None  # then it is treated as a measured profile
    assert roofline_params({}) is None
