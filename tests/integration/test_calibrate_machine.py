"""`stalesim calibrate --calibration`: the executor's terms written beside the link figures,
read back by simulate; the flags it cannot go with fail first, in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stalesim.cli import main
from stalesim.cost.calibration import MachineCalibration, read_calibration


def _fit(a: float) -> dict[str, float]:
    return {"alpha_s": a, "beta_s_per_byte": 1e-10}


def _link(backend: str, ranks: int, **_kw: Any) -> dict[str, Any]:
    return {"schema_version": 1, "device": "cpu-core", "comm_overlaps_compute": False, "cpu_comm_occupancy": 1.0,
            "link": {"name": "loopback", "latency_s": 5e-5, "bandwidth_Bps": 1e9, "fit_max_rel_error": 0.05,
                     "best_case": {"latency_s": 4e-5}},
            "allreduce": {"algorithm": "ring", "measured": []}}


def _measured(*_a: Any, **_kw: Any) -> MachineCalibration:
    comm = {k: _fit(a) for k, a in (("post", 2e-5), ("complete", 1e-5), ("ar_post", 3e-5), ("ar_complete", 3e-5))}
    return MachineCalibration(overhead_s={"F": 4e-5, "B": 6e-5, "U": 1e-5, "LOSS": 2e-5}, comm=comm,
                              host_cores=2, threads=1, source="calibrate")


def test_calibrate_writes_the_terms_simulate_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import stalesim.cost.calibration as calibration
    import stalesim.workloads.calibrate as link

    monkeypatch.setattr(link, "calibrate", _link)
    monkeypatch.setattr(calibration, "measure_calibration", _measured)
    hw, cal = tmp_path / "hw.json", tmp_path / "cal.json"
    assert main(["calibrate", "-o", str(hw), "--calibration", str(cal)]) == 0
    out = capsys.readouterr().out
    assert read_calibration(cal) == _measured()
    assert "per-action runtime overhead: F 40 us, B 60 us, U 10 us, LOSS 20 us" in out
    assert "(0, not in " in out and "executor gaps between actions, compute a message takes" in out

    prof = tmp_path / "p.json"
    from stalesim.workloads.profile import uniform_profile

    uniform_profile(4, 1e-3, 2e-3, 32, param_bytes=4000, output_bytes=800, saved_bytes=800).to_json(prof)
    args = ["simulate", "--profile", str(prof), "--schedule", "1f1b", "-S", "2", "-M", "4", "--hardware", str(hw),
            "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main([*args, "--calibration", str(cal)]) == 0
    d = json.loads(capsys.readouterr().out)
    # 4 micro-batches x (F + B + LOSS + U share) of overhead on the busier rank at least
    assert d["iteration_time_s"] > plain + 4 * (40e-6 + 60e-6)
    assert d["cost_terms_at_default"] == ["executor gaps between actions", "compute a message takes"]


@pytest.mark.parametrize("flags, words", [(["--gemm"], "--gemm"), (["--backend", "nccl"], "gloo")])
def test_what_calibration_cannot_go_with_fails_first(tmp_path: Path, flags: list[str], words: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "-o", str(tmp_path / "hw.json"), "--calibration", str(tmp_path / "c.json"),
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stalesim: error: --calibration:") and words in err and "\n" not in err
    assert not (tmp_path / "hw.json").exists()
