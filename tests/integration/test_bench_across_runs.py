"""experiments/bench_across_runs.py: stored validate runs side by side, re-predicted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.bench_across_runs import main, side_by_side

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
#: written before the after-wait curves: today's code predicts them as validate did then
RUN = RESULTS / "validate_resnet32_cpu2_interleaved_2026-11-28"


def _copy(tmp_path: Path, name: str, scale: float = 1.0) -> Path:
    """A copy of :data:`RUN` whose measured times are ``scale`` times the stored ones."""
    out = tmp_path / name
    shutil.copytree(RUN, out, ignore=shutil.ignore_patterns("*.md", "*.csv"))
    s = json.loads((out / "summary.json").read_text())
    for r in s["rows"]:
        r["measured_iteration_time_s"] *= scale
    (out / "summary.json").write_text(json.dumps(s))
    return out


@pytest.fixture(scope="module")
def twice() -> dict:
    """The stored run side by side with itself (each prediction of its 18 schedules takes
    seconds): one table, asserted on by the tests that read it unchanged."""
    return side_by_side([RUN, RUN])


def test_the_same_run_twice_gives_todays_errors_and_their_signs(twice: dict) -> None:
    """Each run re-predicted with today's model, as bench_stage_estimators' ``pooled`` does."""
    from experiments.bench_stage_estimators import repredict

    res = twice
    today = {r["schedule"]: r["error"] for r in repredict(RUN, ("pooled",))["rows"]}
    assert len(res["rows"]) == 18
    for r in res["rows"]:
        e = today[r["schedule"]]
        assert r["errors"] == [pytest.approx(e, abs=1e-9)] * 2 and r["mean_error"] == pytest.approx(e, abs=1e-9)
        assert r["sign"] == ("all-" if e < 0 else "all+")
    assert res["schedules_one_sign"] == 18


def test_a_slower_run_moves_every_mean_and_can_mix_the_signs(tmp_path) -> None:
    """Measured 10% slower in one run: each schedule's error there is (1 + e) / 1.1 - 1, the
    mean the average of the two, and a schedule predicted a little high becomes mixed."""
    slow = _copy(tmp_path, "slow", 1.1)
    res = side_by_side([RUN, slow])
    for r in res["rows"]:
        e0, e1 = r["errors"]
        assert e1 == pytest.approx((1 + e0) / 1.1 - 1, rel=1e-9)
        assert r["mean_error"] == pytest.approx((e0 + e1) / 2)
        assert r["sign"] == ("mixed" if e0 > 0 else "all-")
    assert res["schedules_mean_negative"] == 18


def test_bad_input_is_one_error_line(tmp_path, capsys) -> None:
    assert main([str(RUN)]) == 2
    assert main([str(RUN), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("bench_across_runs: error: runs: ") for e in err)
    assert "summary.json" in err[1]
    with pytest.raises(SystemExit) as e:
        main([str(RUN), str(RUN), "--host-cores", "0"])
    assert e.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith("error: argument --host-cores: expected an integer >= 1, got 0")


def test_the_command_prints_and_writes_the_table(tmp_path, capsys) -> None:
    out = tmp_path / "across.json"
    assert main([str(RUN), str(_copy(tmp_path, "same")), "--out", str(out)]) == 0
    assert "median |mean|" in capsys.readouterr().out
    assert json.loads(out.read_text())["schedules_one_sign"] == 18


def test_a_measured_message_cost_slows_the_pipelines_and_bad_files_are_one_line(tmp_path, capsys,
                                                                              twice: dict) -> None:
    """``--lost-from``: the stored run re-predicted with a per-message compute loss added; a
    pipeline's messages cost its ranks, data parallelism sends none."""
    hw = tmp_path / "hardware.json"
    hw.write_text(json.dumps({"executor_comm": {"lost_sender": {"alpha_s": 0.0, "beta_s_per_byte": 0.0},
                                                "lost_receiver": {"alpha_s": 2e-4, "beta_s_per_byte": 0.0}}}))
    from experiments.bench_across_runs import lost_fits

    base = twice
    more = side_by_side([RUN, RUN], lost_fits(hw))
    moved = {r["schedule"]: m["mean_error"] - r["mean_error"] for r, m in zip(base["rows"], more["rows"])}
    assert moved["dp"] == pytest.approx(0.0, abs=1e-12)
    # 200 us per message a receive found there: 1f1b's steady state finds some, the
    # interleaved schedule (twice the messages) more; gpipe's receives all wait
    assert 0 < moved["1f1b"] < moved["interleaved-1f1b"]
    assert moved["gpipe"] == pytest.approx(0.0, abs=1e-12)
    assert all(v >= -1e-9 for v in moved.values())
    bad = tmp_path / "none.json"
    bad.write_text("{}")
    assert main([str(RUN), str(RUN), "--lost-from", str(bad)]) == 2
    assert main([str(RUN), str(RUN), "--lost-from", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("bench_across_runs: error: --lost-from: ") for e in err)
