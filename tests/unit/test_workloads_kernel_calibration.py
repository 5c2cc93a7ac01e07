"""`stalesim calibrate --gemm` on a CPU: the dry grid runs and writes a table the model reads back."""

import json

import pytest

from stalesim.cli import main
from stalesim.workloads.hardware import get_device
from stalesim.workloads.kernel_calibration import CPU_ATTENTION, CPU_GEMMS, GPU_GEMMS
from stalesim.workloads.kernel_efficiency import gemm_efficiency, load_table


def test_dry_grid_writes_a_readable_table(tmp_path, capsys):
    out = tmp_path / "table.json"
    assert main(["calibrate", "--gemm", "--repeats", "1", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["dry"] is True and data["device_key"] == "cpu-core" and data["dtype"] == "float32"
    assert [(r["m"], r["n"], r["k"]) for r in data["gemm"]] == [(g.m, g.n, g.k) for g in CPU_GEMMS]
    assert len(data["attention"]) == len(CPU_ATTENTION)
    for r in data["gemm"]:
        assert r["seconds"] > 0 and r["efficiency"] == pytest.approx(r["tflops"] * 1e12 / data["peak_flops"])
    t = load_table(out)
    g = CPU_GEMMS[0]
    assert gemm_efficiency(get_device("cpu-core"), g, "float32", t) == pytest.approx(
        min(1.0, data["gemm"][0]["efficiency"]))
    assert "dry run" in capsys.readouterr().out


def test_unknown_gemm_device_is_one_line(tmp_path, capsys):
    assert main(["calibrate", "--gemm", "--gemm-device", "nope", "-o", str(tmp_path / "t.json")]) == 2
    assert capsys.readouterr().err.strip().startswith("stalesim: error: --gemm-device:")
    assert not (tmp_path / "t.json").exists()


def test_gpu_grid_spans_transformer_shapes():
    assert len(GPU_GEMMS) == 100 and {g.m for g in GPU_GEMMS} == {512, 2048, 8192, 32768}
