"""experiments/bench_stage_estimators.py: re-predicting a stored validate run per estimator."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.bench_stage_estimators import main, repredict

#: a stored validate folder with everything a re-prediction reads (written before pass means)
RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "validate_resnet32_cpu2_interleaved_2026-11-28"


def test_pooled_moves_the_stored_predictions_a_little() -> None:
    """The folder was predicted with each layout's own contended times (a model since
    replaced); ``pooled`` (today's model) moves its predictions by the difference between a
    layout's ratio and its batch's pooled one, a few percent, for every schedule."""
    res = repredict(RUN, ("pooled",))
    stored = {r["schedule"]: r for r in json.loads((RUN / "summary.json").read_text())["rows"]}
    pooled = [r for r in res["rows"] if r["estimator"] == "pooled"]
    assert len(pooled) == len(stored) - sum(1 for r in stored.values() if not r.get("measured_iteration_time_s"))
    moved = [abs(r["predicted_s"] / stored[r["schedule"]]["predicted_iteration_time_s"] - 1) for r in pooled]
    assert 0 < max(moved) < 0.08 and sorted(moved)[len(moved) // 2] < 0.03
    agg = res["aggregate"]["pooled"]
    assert agg["n"] == len(pooled) == 18  # every schedule; the 1-rank baseline is no row
    assert agg["median_abs_error"] <= agg["max_abs_error"]


def test_pass_median_moves_only_the_layout_with_a_slow_pass(tmp_path) -> None:
    """Three passes with one 2x slow on a single layout: pass-median predicts that layout's
    schedules faster than pooled, every other schedule the same."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("*.md", "*.csv"))
    s = json.loads((run / "summary.json").read_text())
    target = "ppv=[13] batch=16 stages=--"  # gpipe's and 1f1b's layout
    for e in s["cost_model"]["stage_times"]:
        for t in (e, e["contended"]) if e.get("contended") else (e,):
            slow = e["label"] == target
            means = t["mean_s"]
            # pooled mean m = mean of (a, a, 2a) -> a = 3m/4 for the slow layout
            base = [{k: v * (0.75 if slow else 1.0) for k, v in m.items()} for m in means]
            t["pass_means_s"] = [base, base, [{k: v * (2 if slow else 1) for k, v in m.items()} for m in base]]
    # the rows of the schedules asserted on below, each on another side of the slow layout (a
    # row is predicted alone from the stage times, 5 times here; the pooled test predicts all 18)
    asserted = {"gpipe", "1f1b", "pipedream", "dp", "zb-h1", "interleaved-1f1b"}
    s["rows"] = [r for r in s["rows"] if r["schedule"] in asserted]
    (run / "summary.json").write_text(json.dumps(s))
    res = repredict(run, ("pooled", "pass-median"), per_pass=True)
    by = {(r["schedule"], r["estimator"]): r["predicted_s"] for r in res["rows"]}
    for name in ("gpipe", "1f1b"):
        assert by[(name, "pass-median")] < 0.9 * by[(name, "pooled")]
    for name in ("pipedream", "dp"):  # other layouts at other action batches: untouched
        assert by[(name, "pass-median")] == pytest.approx(by[(name, "pooled")], rel=1e-6)
    for name in ("zb-h1", "interleaved-1f1b"):  # the slow layout's batch: only via the pooled contention
        assert by[(name, "pass-median")] == pytest.approx(by[(name, "pooled")], rel=0.01)
    # each pass alone: the first two are the median's times, the slow third moves only gpipe/1f1b
    assert by[("gpipe", "pass-0")] == pytest.approx(by[("gpipe", "pass-median")], rel=1e-6)
    assert by[("gpipe", "pass-2")] > 1.5 * by[("gpipe", "pass-0")]
    spread = res["pass_spread"]
    assert spread["gpipe"] > 0.2 and spread["pipedream"] == pytest.approx(0.0, abs=1e-6)
    assert {r["estimator"] for r in res["rows"]} == {"pooled", "pass-median", "pass-0", "pass-1", "pass-2"}
    assert {r["schedule"] for r in res["rows"]} == asserted


def test_bad_input_is_one_error_line(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2 and "no summary.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(RUN), "--estimators", "pooled,best"])
    assert e.value.code == 2 and "unknown best" in capsys.readouterr().err
    for argv in ([str(RUN)], [str(RUN), "--estimators", "pooled", "--per-pass"]):
        with pytest.raises(SystemExit) as e:  # a folder written before the pass means were kept
            main(argv)
        assert e.value.code == 2 and "no per-pass means" in capsys.readouterr().err
