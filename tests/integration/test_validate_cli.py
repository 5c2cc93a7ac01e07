"""``stalesim validate`` end to end on 2 CPU ranks (short), and its one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _fixed_hardware import fixed_hardware

from stalesim.cli import main


@pytest.mark.slow
def test_validate_two_cpu_ranks_short(tmp_path: Path, capfd) -> None:
    """One round (validate's rounds and their resume: test_validate_checkpoint), on a fixed
    hardware file with the per-message costs (the calibrations are tested on their own)."""
    out = tmp_path / "v"
    rc = main(["validate", "--model", "lenet5", "--devices", "cpu:2", "--schedules", "1f1b,pipe-sgd",
               "--iterations", "8", "--batch-size", "16", "--microbatches", "2", "--repeats", "1",
               "--profile-repeats", "1", "--emulate-iterations", "3", "--hardware", str(fixed_hardware(tmp_path)),
               "--out", str(out),
               "--quiet"])
    assert rc == 0
    text = capfd.readouterr().out
    assert "1f1b" in text and "pipe-sgd" in text
    for f in ("report.md", "summary.json", "profile.json", "profile_contended.json", "hardware.json",
              "figures/iteration_time.png", "figures/loss.png", "figures/timeline_1f1b.png",
              "figures/timeline_pipe-sgd.png", "traces/1f1b.sim.json", "runs/1f1b/trace.json"):
        assert (out / f).is_file(), f
    summary = json.loads((out / "summary.json").read_text())
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(summary["rows"])
    assert list(df["schedule"]) == ["1f1b", "pipe-sgd"]
    for r in summary["rows"]:
        assert math.isfinite(r["time_error"]) and r["predicted_iteration_time_s"] > 0
        assert r["measured_iteration_time_s"] > 0
        for key in ("predicted_utilization", "measured_utilization"):
            assert len(r[key]) == 2 and all(0.0 <= u <= 1.0 for u in r[key])
        assert 0 <= r["predicted_utilization_mean"] <= 1 and 0 <= r["measured_utilization_mean"] <= 1
        assert r["predicted_speedup"] > 0 and r["measured_speedup"] > 0
        assert r["max_loss_rel_diff"] is not None and r["max_loss_rel_diff"] < 1e-4
        assert r["versions_match_ir"] is True
        assert len(r["predicted_peak_memory_bytes"]) == 2 and len(r["measured_peak_memory_bytes"]) == 2
    assert math.isfinite(summary["median_abs_time_error"]) and math.isfinite(summary["max_abs_time_error"])
    assert summary["load_average"]["before"] is not None
    assert summary["command"].startswith("stalesim")
    assert summary["cost_model"]["overhead_s"]["F"] >= 0
    # the same terms as a machine calibration simulate/sweep/plan read back (--calibration)
    from stalesim.cost.calibration import read_calibration

    cal = read_calibration(out / "calibration.json")
    assert cal.source == "validate" and cal.overhead_s == summary["cost_model"]["overhead_s"]
    # every layout timed between the rounds, alone and with the co-runner busy (2 CPU ranks)
    layouts = summary["cost_model"]["stage_times"]
    assert len(layouts) >= 2  # the 2-stage runs' and the 1-rank baseline's
    for e in layouts:
        assert len(e["contended"]["mean_s"]) == len(e["mean_s"]) and e["contention_ratio"] > 0
    report = (out / "report.md").read_text()
    assert "| 1f1b |" in report and "figures/iteration_time.png" in report
    row = next(ln for ln in report.splitlines() if "stage times with co-runners busy" in ln)
    assert "n/a" not in row


@pytest.mark.parametrize("argv, needle", [
    (["--schedules", "1f1b,bogus"], "unknown schedule 'bogus'"),
    (["--devices", "gpu:2"], "--devices"),
    (["--devices", "cpu:x"], "--devices"),
    (["--batch-size", "30", "--microbatches", "4", "--schedules", "gpipe"], "--batch-size"),
    (["--ppv", "1,2"], "--ppv"),
    (["--model", "nonet"], "--model"),
])
def test_bad_input_one_line_exit_2(tmp_path: Path, capsys, argv, needle) -> None:
    rc = main(["validate", "--out", str(tmp_path / "o"), *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and err.startswith("stalesim: error:") and needle in err


def test_out_not_writable(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["validate", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "--out" in err


@pytest.fixture
def no_validation_work(monkeypatch):
    import stalesim.validate.workflow as wf

    def boom(*a, **k):
        raise AssertionError("validate started working on input that should have been refused up front")

    monkeypatch.setattr(wf, "validate", boom)


@pytest.mark.parametrize("content,needle", [
    ('{"schema_version": 1, "device": "h100-sxm", "li', "not valid JSON"),
    ('{"device": "h100-sxm", "link": "nosuch"}', "link: unknown 'nosuch'"),
    ("", "not valid JSON"),
])
def test_broken_hardware_refused_before_profiling(tmp_path: Path, capsys, no_validation_work, content,
                                                   needle) -> None:
    """Bad-input probe: a truncated --hardware failed after 16 s of profiling."""
    hw = tmp_path / "hw.json"
    hw.write_text(content)
    rc = main(["validate", "--out", str(tmp_path / "o"), "--hardware", str(hw)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and needle in err and "hardware" in err


@pytest.mark.parametrize("argv, needle", [
    (["--iterations", "100000000"], "argument --iterations"),
    (["--threads", "100000"], "argument --threads"),
    (["--timeout", "nan"], "argument --timeout"),
    (["--seed", "-1"], "argument --seed"),
    (["--model", "resnet6000002"], "deeper than this tool builds"),
    (["--devices", "cpu:6"], "--devices: 6 pipeline stages but model 'lenet5' has only 5 blocks"),
    (["--devices", "cpu:100000"], "more than this tool starts"),
    (["--iterations", "1000000", "--schedules", "stale"], "actions"),
])
def test_absurd_numbers_refused_up_front(tmp_path: Path, capsys, no_validation_work, argv, needle) -> None:
    try:
        rc = main(["validate", "--out", str(tmp_path / "o"), *argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("stalesim: error:") and needle in err, err


@pytest.fixture
def no_demo_work(monkeypatch):
    import stalesim.cli.demo_cmd as demo

    def boom(*a, **k):
        raise AssertionError("the demo started on input that should have been refused up front")

    monkeypatch.setattr(demo, "run_demo", boom)


@pytest.mark.parametrize("argv, needle", [
    (["--schedules", "nosuch"], "unknown schedule 'nosuch'"),
    (["--quick", "--schedules", "nosuch"], "unknown schedule 'nosuch'"),  # --quick honours given flags
    (["--iterations", "-1"], "demo: argument --iterations"),
    (["--iterations", "2"], "--iterations: need at least 4"),
    (["--target", "tpu9"], "--target: device: unknown 'tpu9'"),
    (["--data-dir", "/no/such/folder"], "--data-dir: '/no/such/folder' is not a folder"),
    (["--stages", "1000"], "demo: argument --stages"),
    (["--model", "nosuch"], "--model: unknown 'nosuch'"),
])
def test_demo_refuses_bad_flags_before_step_1(tmp_path: Path, capsys, no_demo_work, argv, needle) -> None:
    """Bad-input probe: `demo --schedules nosuch` ran every step and exited 0; `--iterations -1`
    was refused after 33 s of profiling."""
    try:
        rc = main(["demo", "--out", str(tmp_path / "demo"), *argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("stalesim: error:") and needle in err, err
