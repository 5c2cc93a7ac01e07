"""One cost model: ``simulate``, ``sweep``, ``plan`` and validate's predictor give the same
iteration time for the same configuration, calibration and schedule, for every registered
schedule (stalesim.cost.apply.predict is the one path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _calibration import calibration

from stalesim.cli import main
from stalesim.cost.apply import predict, simulate_with_costs
from stalesim.cost.calibration import MachineCalibration, write_calibration
from stalesim.cost.model import CostModel
from stalesim.cost.terms import link_from_comm
from stalesim.plan.candidates import Candidate
from stalesim.plan.timing import time_candidate
from stalesim.schedule import ScheduleConfig, get_spec, schedule_names
from stalesim.sim import SimOptions, simulate
from stalesim.sim.model import SimHardware
from stalesim.workloads.profile import uniform_profile

B = 32
BATCHES = 12


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("one")
    uniform_profile(6, 1e-3, 2e-3, B, update_s=2e-4, param_bytes=40_000, output_bytes=8_000,
                    saved_bytes=8_000).to_json(d / "p.json")
    write_calibration(d / "cal.json", calibration())
    return str(d / "p.json"), str(d / "cal.json")


def shape(name: str) -> tuple[int, int, int, int]:
    """(stages, stages per device, micro-batches, workers) of a 2-device run of ``name``."""
    spec = get_spec(name)
    v = spec.stages_per_device
    return 2 * v, v, 4 if spec.uses_micro else 1, 2 if spec.data_parallel else 1


def validate_predictor(prof, cal: MachineCalibration, cfg: ScheduleConfig) -> float:
    """What validate predicts with: its cost model built as its steps build it (profile,
    overhead, host cores, then the per-message costs and the gaps of the baseline run), on
    the link its calibration step leaves."""
    cm = CostModel(prof, None, dict(cal.overhead_s), [], host_cores=cal.host_cores)
    cm.comm = cal.comm
    cm.dispatch_s, cm.gaps_s = cal.dispatch_s, dict(cal.gaps_s)
    hw = link_from_comm(SimHardware.ideal(prof.device), cm.comm, workers=cfg.workers)
    result, _ = simulate_with_costs(cm, hw, cfg, ppv=None, batch_size=B)
    return result.iteration_time_s


@pytest.mark.parametrize("name", schedule_names())
def test_simulate_sweep_plan_and_validate_agree(name: str, files: tuple[str, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from stalesim.workloads.profile import load_profile

    prof_path, cal_path = files
    prof = load_profile(prof_path)
    S, V, M, P = shape(name)
    cal = calibration()
    cfg = ScheduleConfig(name, stages=S, microbatches=M, workers=P, batches=BATCHES,
                         stages_per_device=V if V > 1 else None)
    want = validate_predictor(prof, cal, cfg)

    common = ["--profile", prof_path, "--batch-size", str(B), "--batches", str(BATCHES),
              "--calibration", cal_path]
    assert main(["simulate", *common, "--schedule", name, "-S", str(S), "-M", str(M), "-P", str(P),
                 *(["-V", str(V)] if V > 1 else []), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert main(["sweep", *common, "--schedules", name, "-S", str(S), "-M", str(M), "-P", str(P),
                 *(["-V", str(V)] if V > 1 else []), "--method", "event", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["error"] == ""
    cand = Candidate(name, devices=2, stages=S, microbatches=M, workers=P,
                     stages_per_device=V if V > 1 else None)
    planned = time_candidate(cand, prof, SimHardware.ideal(prof.device), batch_size=B, calibration=cal,
                             extra_options={"keep_timeline": True})
    assert sim["iteration_time_s"] == pytest.approx(want, rel=1e-12)
    assert rows[0]["iteration_time_s"] == pytest.approx(want, rel=1e-12)
    # plan simulates the schedule's own default length: validate's predictor of that configuration
    assert planned.steady_s == pytest.approx(validate_predictor(prof, cal, cand.schedule_config(warmup=0)),
                                             rel=1e-12)
    assert sim["cost_terms_at_default"] == []


def test_the_calibrated_terms_change_the_prediction_and_a_missing_one_is_named(
        files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """The calibration is not ignored (a pipeline pays its overheads); without it simulate
    names every term at its default, and a calibration without per-message costs names those."""
    prof_path, cal_path = files
    args = ["simulate", "--profile", prof_path, "--schedule", "1f1b", "-S", "2", "-M", "4", "--batch-size", str(B)]
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--calibration", cal_path, "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["iteration_time_s"] > plain["iteration_time_s"] * 1.02
    assert plain["cost_terms_at_default"] == ["per-action runtime overhead", "executor gaps between actions",
                                              "per-message CPU cost", "compute a message takes", "host cores"]
    assert main(args) == 0
    assert "cost terms at their defaults (0, no --calibration): per-action runtime overhead" in capsys.readouterr().out


def test_a_calibration_of_zeros_is_the_profile_and_the_link_alone() -> None:
    """The defaults are what the documentation says: every term zero gives the plain simulation."""
    prof = uniform_profile(6, 1e-3, 2e-3, B, param_bytes=4000, output_bytes=800, saved_bytes=800)
    hw = SimHardware.ideal(prof.device)
    for name in ("1f1b", "pipedream", "dp"):
        S, _V, M, P = shape(name)
        cfg = ScheduleConfig(name, stages=S, microbatches=M, workers=P, batches=BATCHES)
        zero = predict(prof, MachineCalibration(), cfg, hw, SimOptions(batch_size=B))
        plain = simulate(prof, cfg, hw, SimOptions(batch_size=B))
        assert zero.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("flags, field", [(["--target", "h100-sxm"], "--target"),
                                          (["--method", "fast"], "--method")])
def test_a_calibration_does_not_carry_over(files: tuple[str, str], flags: list[str], field: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    prof_path, cal_path = files
    assert main(["simulate", "--profile", prof_path, "--schedule", "1f1b", "-S", "2", "--calibration", cal_path,
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stalesim: error: --calibration:") and field in err and "\n" not in err


def test_validate_writes_what_simulate_reads(tmp_path: Path) -> None:
    """A validation's cost model stored as a calibration reads back to the same prediction."""
    from stalesim.cost.calibration import read_calibration

    prof = uniform_profile(6, 1e-3, 2e-3, B, param_bytes=4000, output_bytes=800, saved_bytes=800)
    cal = calibration()
    cm = CostModel.from_calibration(prof, cal)
    write_calibration(tmp_path / "c.json", cm.calibration(source="validate"))
    back = read_calibration(tmp_path / "c.json")
    cfg = ScheduleConfig("1f1b", stages=2, microbatches=4, batches=BATCHES)
    hw = SimHardware.ideal(prof.device)
    a = predict(prof, cal, cfg, hw, SimOptions(batch_size=B)).iteration_time_s
    assert predict(prof, back, cfg, hw, SimOptions(batch_size=B)).iteration_time_s == a
    assert back.source == "validate"
