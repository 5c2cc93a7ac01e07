"""GEMM and attention efficiency by shape: published ceilings, wave quantization, roofline, measured tables."""

import json

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.hardware import get_device
from stalesim.workloads.kernel_efficiency import (
    TABLE_ENV,
    AttentionShape,
    GemmShape,
    KernelTable,
    attention_efficiency,
    causal_fraction,
    ceilings,
    gemm_efficiency,
    load_table,
    table_for,
    wave_fill,
)

A100 = get_device("a100-80gb-sxm")
H100 = get_device("h100-sxm")


def test_wave_fill_is_the_last_waves_share():
    # 108 SMs, 128 x 128 tiles: 16 x 16 = 256 tiles = 2 full waves + 40 of a third
    assert wave_fill(108, 2048, 2048, tiles=((128, 128),)) == pytest.approx(256 / (3 * 108))
    # exactly one full wave fills every SM
    assert wave_fill(132, 128 * 12, 128 * 11, tiles=((128, 128),)) == 1.0
    # partial tiles compute padding: a 64-row GEMM uses half of each 128-row tile
    assert wave_fill(1, 64, 128, tiles=((128, 128),)) == 0.5
    assert wave_fill(None, 7, 7) == 1.0  # no SM count stated: no quantization


def test_ceilings_come_from_the_data_file_with_a_fallback():
    assert ceilings(A100).gemm == 0.869 and "MAMF" in ceilings(A100).source
    assert ceilings(H100).attention("flash") == 0.35 and ceilings(H100).attention("fa3") == 0.75
    v100 = get_device("v100-sxm2")
    assert ceilings(v100).gemm == 0.70 and "fallback" in ceilings(v100).source
    assert ceilings(H100, "float32").gemm == 0.70  # the measurement is bf16 only
    with pytest.raises(StalesimError, match="^flash_kernel:"):
        ceilings(H100).attention("xformers")


def test_large_gemm_reaches_the_ceiling_and_small_ones_do_not():
    big = GemmShape(128 * 132 * 4, 256, 8192)
    assert gemm_efficiency(H100, big) == pytest.approx(0.803 * wave_fill(132, big.m, big.n))
    assert gemm_efficiency(H100, GemmShape(16384, 16384, 8192)) > 0.78
    small = GemmShape(256, 256, 256)  # 2 tiles on 132 SMs
    assert gemm_efficiency(H100, small) < 0.05


def test_a_thin_gemm_is_memory_bound():
    """m = 128 rows against a 32768^2 weight: about 127 FLOP/B, under the H100's 295 FLOP/B ridge
    (its 128 tiles of 128 x 256 fill 97% of one wave, so the compute bound is not what limits it)."""
    g = GemmShape(128, 32768, 32768)
    bytes_ = g.operand_bytes(2)
    assert gemm_efficiency(H100, g) == pytest.approx(g.flops / (bytes_ / H100.mem_bandwidth_Bps)
                                                     / H100.flops_per_s("bfloat16"))


def test_micro_batch_one_and_sixteen_differ():
    one, sixteen = (gemm_efficiency(A100, GemmShape(b * 2048, 3 * 6144 // 8, 6144)) for b in (1, 16))
    assert sixteen > one + 0.05


def test_causal_attention_runs_half_the_blocks():
    assert causal_fraction(128) == 1.0
    assert causal_fraction(4096) == pytest.approx(33 / 64)
    a = AttentionShape(2, 16, 4096, 128)
    assert a.executed_flops == pytest.approx(4 * 2 * 16 * 4096 ** 2 * 128 * 33 / 64)
    assert AttentionShape(2, 16, 4096, 128, causal=False).executed_flops == 4 * 2 * 16 * 4096 ** 2 * 128
    # fewer heads than a wave of query blocks leaves SMs idle
    assert attention_efficiency(A100, AttentionShape(1, 1, 1024, 128)) == pytest.approx(0.73 * 8 / 108)
    assert attention_efficiency(A100, AttentionShape(8, 96, 4096, 128)) > 0.7


def test_a_table_replaces_the_level(tmp_path, monkeypatch):
    rows = {"device": "NVIDIA H100 80GB HBM3", "device_key": "h100-sxm", "dtype": "bfloat16",
            "gemm": [{"m": 4096, "n": 4096, "k": 4096, "batch": 1, "efficiency": 0.6}],
            "attention": [{"batch": 1, "heads": 32, "seq": 4096, "head_dim": 128, "efficiency": 0.5}]}
    f = tmp_path / "t.json"
    f.write_text(json.dumps(rows))
    t = load_table(f)
    assert gemm_efficiency(H100, GemmShape(4096, 4096, 4096), table=t) == pytest.approx(0.6)
    assert attention_efficiency(H100, AttentionShape(1, 32, 4096, 128), table=t) == pytest.approx(0.5)
    assert gemm_efficiency(H100, GemmShape(4096, 4096, 4096), "float16", table=t) != pytest.approx(0.6)
    monkeypatch.setenv(TABLE_ENV, str(f))
    assert table_for(H100) == t
    monkeypatch.delenv(TABLE_ENV)
    assert table_for(H100) is None  # no stored table for the H100 yet


@pytest.mark.parametrize("doc, match", [
    ({"gemm": "x"}, "a 'gemm' list"),
    ({"gemm": [{"m": 1, "n": 1}]}, r"gemm\[0\]: needs integer"),
    ({"gemm": [{"m": 0, "n": 1, "k": 1, "batch": 1, "efficiency": 0.5}]}, r"gemm\[0\]: sizes"),
    ({"gemm": [{"m": 1, "n": 1, "k": 1, "batch": 1, "efficiency": -1}]}, "efficiency positive"),
])
def test_bad_tables_are_one_line_errors(doc, match):
    with pytest.raises(StalesimError, match=match):
        KernelTable.from_dict(doc)


def test_unreadable_table_names_the_variable(tmp_path):
    with pytest.raises(StalesimError, match=f"^{TABLE_ENV}:"):
        load_table(tmp_path / "missing.json")
