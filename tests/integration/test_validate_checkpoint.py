"""A validation's finished rounds on disk and ``validate --resume``: the round files read
back exactly, a configuration that measures otherwise is refused naming the field, and a
validation that fails after (or between) its rounds resumes without running them again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _fixed_hardware import fixed_hardware
from _validate_fakes import PassCounter

from stalesim.devices import parse_devices
from stalesim.errors import StalesimError
from stalesim.validate.checkpoint import FOLDER, clear, load, round_path, save_round
from stalesim.validate.config import ValidateConfig
from stalesim.validate.steps import Validation


def _cfg(tmp_path: Path, **kw: Any) -> ValidateConfig:
    return ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16, microbatches=4,
                          out=str(tmp_path), repeats=3, **kw)


def test_rounds_read_back_exactly_in_round_order(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    for k in range(2):
        save_round(tmp_path, cfg, k, overhead_s={"F": 1e-6}, base_run={"base": k},
                   runs={"1f1b": {"t": 10 + k}, "gpipe": {"t": 20 + k}}, timer=PassCounter([1, 2]))
    got = load(tmp_path, cfg)
    assert got.rounds == 2 and got.overhead_s == {"F": 1e-6}
    assert got.base_runs == [{"base": 0}, {"base": 1}]
    assert got.runs == {"1f1b": [{"t": 10}, {"t": 11}], "gpipe": [{"t": 20}, {"t": 21}]}
    assert got.timer is not None and got.timer["passes"] == 0 and got.timer["layouts"] == 2
    # a gap ends the rounds: round 3 without round 2 is not read
    save_round(tmp_path, cfg, 3, overhead_s={}, base_run={}, runs={}, timer=None)
    assert load(tmp_path, cfg).rounds == 2


def test_other_measuring_options_are_refused_naming_the_field(tmp_path: Path) -> None:
    save_round(tmp_path, _cfg(tmp_path), 0, overhead_s={}, base_run={}, runs={}, timer=None)
    with pytest.raises(StalesimError, match=r"--resume: .* batch_size = 16, this command has 32"):
        load(tmp_path, ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=32,
                                      microbatches=4, repeats=3))
    with pytest.raises(StalesimError, match="repeats = 3, this command has 5"):
        load(tmp_path, ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16,
                                      microbatches=4, repeats=5))
    # where it writes, the deadline and the emulation do not change what a round measured
    same = _cfg(tmp_path, timeout_s=9.0, emulate_iterations=0, command="x", resume=True)
    assert load(tmp_path, same).rounds == 1


def test_no_round_or_a_broken_file_is_one_error_line(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    with pytest.raises(StalesimError, match="no finished round"):
        load(tmp_path, cfg)
    path = round_path(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 2, "config": ')
    with pytest.raises(StalesimError, match="not a validate round file") as exc:
        load(tmp_path, cfg)
    assert "\n" not in str(exc.value)
    path.write_text(json.dumps({"format": 99}))
    with pytest.raises(StalesimError, match="format 2"):
        load(tmp_path, cfg)


def test_a_new_validation_clears_the_earlier_rounds(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    for k in range(3):
        save_round(tmp_path, cfg, k, overhead_s={}, base_run={}, runs={}, timer=None)
    (tmp_path / FOLDER / "notes.txt").write_text("kept")
    clear(tmp_path)
    assert sorted(p.name for p in (tmp_path / FOLDER).iterdir()) == ["notes.txt"]
    clear(tmp_path / "nothing-here")  # no folder: nothing to do


def _fake_runs(monkeypatch, calls: list[str], fail_at_round: int | None = None) -> None:
    import stalesim.executor.launch

    def fake_run_local(jobs, devs, **_kw):
        js = [jobs] if isinstance(jobs, dict) else jobs
        names = [Path(j["out"]).name for j in js]
        if fail_at_round is not None and any(n.endswith(f".r{fail_at_round}") for n in names):
            raise KeyboardInterrupt  # the run killed in this round
        calls.extend(names)
        res = [{"label": j["label"], "run_dir": j["out"]} for j in js]
        return res[0] if isinstance(jobs, dict) else res

    monkeypatch.setattr(stalesim.executor.launch, "run_local", fake_run_local)
    monkeypatch.setattr("stalesim.validate.stagetime.LayoutTimer", PassCounter)
    monkeypatch.setattr("stalesim.validate.steps._time_pass", lambda v, timer: setattr(timer, "passes",
                                                                                        timer.passes + 1))


def _validation(tmp_path: Path, cfg: ValidateConfig) -> Validation:
    from stalesim.validate.costmodel import CostModel
    from stalesim.workloads.profile import uniform_profile

    prof = uniform_profile(6, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=100)
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["gpipe", "stale"], out=tmp_path,
                   say=lambda _m: None, prof=prof, cm=CostModel(prof, overhead_s={"F": 3e-6}))
    v.base_runs = [{"base": 0}]  # the baseline step's round 0
    return v


def test_a_killed_run_step_resumes_at_its_first_missing_round(tmp_path: Path, monkeypatch) -> None:
    """Killed in round 2 of 3: rounds 0 and 1 are on disk; the resume runs round 2 only,
    and every schedule then has its three runs in round order, the timer its three passes."""
    from stalesim.validate.steps import run_step

    calls: list[str] = []
    cfg = _cfg(tmp_path)
    _fake_runs(monkeypatch, calls, fail_at_round=2)
    with pytest.raises(KeyboardInterrupt):
        run_step(_validation(tmp_path, cfg))
    assert sorted(calls) == ["baseline-1rank.r1", "gpipe", "gpipe.r1", "stale", "stale.r1"]
    assert not round_path(tmp_path, 2).exists()

    calls.clear()
    _fake_runs(monkeypatch, calls)
    v = _validation(tmp_path, cfg)
    v.resumed = load(tmp_path, cfg)
    assert v.resumed.overhead_s == {"F": 3e-6} and v.resumed.timer is not None
    assert v.resumed.timer["passes"] == 2
    run_step(v)
    assert sorted(calls) == ["baseline-1rank.r2", "gpipe.r2", "stale.r2"]
    for name in ("gpipe", "stale"):
        assert [Path(r["run_dir"]).name for r in v.runs[name]] == [name, f"{name}.r1", f"{name}.r2"]
    assert [b.get("run_dir", "round 0") for b in v.base_runs][1:] == [
        str(tmp_path / "runs" / f"baseline-1rank.r{k}") for k in (1, 2)]
    assert all(t.mean_s == [{"F": 3.0}] for t in v.cm.stage_times.values())  # 2 restored + 1 new pass
    assert load(tmp_path, cfg).rounds == 3


def test_a_resume_with_other_layouts_is_refused(tmp_path: Path, monkeypatch) -> None:
    from stalesim.validate.steps import run_step

    cfg = _cfg(tmp_path)
    _fake_runs(monkeypatch, [])
    save_round(tmp_path, cfg, 0, overhead_s={}, base_run={}, runs={"gpipe": {}, "stale": {}},
               timer=PassCounter([1]))  # one layout timed; this validation has three
    v = _validation(tmp_path, cfg)
    v.resumed = load(tmp_path, cfg)
    with pytest.raises(StalesimError, match="stage layouts"):
        run_step(v)


@pytest.mark.slow
def test_validate_that_failed_after_its_rounds_resumes_without_running_them(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """The real command: it fails in its comparison, after every round ran; ``--resume``
    then starts no rank, no profile and no calibration, and writes the summary of the same
    runs (each schedule's repeats are the first attempt's run folders)."""
    import stalesim.executor.launch
    import stalesim.validate.workflow as wf
    from stalesim.cli import main

    out = tmp_path / "v"
    argv = ["validate", "--model", "lenet5", "--devices", "cpu:2", "--schedules", "1f1b",
            "--iterations", "8", "--batch-size", "16", "--microbatches", "2", "--repeats", "2",
            "--profile-repeats", "1", "--emulate-iterations", "0",
            # no per-message costs in the file: the first attempt measures them, the resume must read them back
            "--hardware", str(fixed_hardware(tmp_path, executor_comm=False)),
            "--out", str(out), "--quiet"]

    def broken_compare(v: Validation) -> None:
        raise StalesimError("compare: a bug found after the rounds")

    real_order = wf.STEP_ORDER
    monkeypatch.setattr(wf, "STEP_ORDER", tuple((n, broken_compare if n == "compare" else s)
                                                for n, s in real_order))
    assert main(argv) == 2
    assert "a bug found after the rounds" in capsys.readouterr().err
    assert not (out / "summary.json").exists() and load(out, _resume_cfg(out)).rounds == 2
    stamps = {p: p.stat().st_mtime_ns for p in (out / "profile.json", out / "hardware.json")}

    monkeypatch.setattr(wf, "STEP_ORDER", real_order)
    started: list[Any] = []

    def no_rank(*a: Any, **kw: Any) -> Any:
        started.append(a)
        raise AssertionError("a resumed validation started a rank")

    monkeypatch.setattr(stalesim.executor.launch, "run_local", no_rank)
    monkeypatch.setattr("stalesim.validate.commcal.measure_comm", no_rank)
    monkeypatch.setattr("stalesim.validate.corunners.paired_profiles", no_rank)
    assert main([*argv, "--resume"]) == 0, capsys.readouterr().err
    assert started == []
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # read, not measured again
    summary = json.loads((out / "summary.json").read_text())
    (row,) = summary["rows"]
    assert row["schedule"] == "1f1b" and row["measured_iteration_time_s"] > 0
    assert len(row["measured_iteration_times_s"]) == 2
    assert summary["config"]["resume"] is True and summary["cost_model"]["stage_times"]


def _resume_cfg(out: Path) -> ValidateConfig:
    return ValidateConfig(model="lenet5", devices="cpu:2", schedules=["1f1b"], iterations=8, batch_size=16,
                          microbatches=2, repeats=2, profile_repeats=1, emulate_iterations=0,
                          hardware=str(out.parent / "hw.json"), out=str(out))
