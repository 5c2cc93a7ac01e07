"""Calibration: the alpha-beta fit, and a quick real gloo run writing valid hardware JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stalesim.cli import main
from stalesim.errors import StalesimError
from stalesim.workloads.calibrate import calibrate, fit_alpha_beta
from stalesim.workloads.hardware import load_hardware


def test_fit_alpha_beta_exact() -> None:
    sizes = [4, 1024, 65536, 1 << 20, 1 << 24]
    times = [20e-6 + n / 5e9 for n in sizes]
    a, bw, err = fit_alpha_beta(sizes, times)
    assert a == pytest.approx(20e-6, rel=1e-6)
    assert bw == pytest.approx(5e9, rel=1e-6)
    assert err < 1e-9


def test_fit_alpha_beta_edge_cases() -> None:
    a, bw, _ = fit_alpha_beta([4, 8, 16], [1e-5, 1e-5, 1e-5])
    assert a == pytest.approx(1e-5) and math.isinf(bw)
    with pytest.raises(StalesimError, match="sizes"):
        fit_alpha_beta([4], [1e-5])
    with pytest.raises(StalesimError, match="distinct"):
        fit_alpha_beta([4, 4], [1e-5, 2e-5])


def test_calibrate_bad_args() -> None:
    with pytest.raises(StalesimError, match="backend"):
        calibrate("mpi", 2)
    with pytest.raises(StalesimError, match="ranks"):
        calibrate("gloo", 1)
    with pytest.raises(StalesimError, match="sizes"):
        calibrate("gloo", 2, sizes=[64])


@pytest.mark.slow
def test_calibrate_gloo_writes_valid_hardware(tmp_path: Path, capsys) -> None:
    out = tmp_path / "hw.json"
    rc = main(["calibrate", "--backend", "gloo", "--ranks", "2", "--sizes", "4,4096,262144",
               "--repeats", "2", "-o", str(out)])
    assert rc == 0
    assert "latency" in capsys.readouterr().out
    hw = load_hardware(out)
    assert hw.link.latency_s >= 0 and hw.link.bandwidth_Bps > 0
    assert not hw.comm_overlaps_compute
    assert 0.0 <= hw.cpu_comm_occupancy <= 1.0
    assert hw.device.kind == "cpu" and hw.device.flops_per_s("float32") > 1e8
    data = json.loads(out.read_text())
    assert [m["bytes"] for m in data["link"]["measured"]] == [4, 4096, 262144]
    assert all(m["seconds"] > 0 for m in data["link"]["measured"])
    assert len(data["allreduce"]["measured"]) == 3 and data["allreduce"]["algorithm"] == "ring"
    # at least AR_SAMPLES collectives per size whatever --repeats: a mean beside the median
    assert all(m["mean_s"] > 0 and m["seconds"] > 0 for m in data["allreduce"]["measured"])
