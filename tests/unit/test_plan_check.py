"""``plan --check``: which rows are checked, and the error with its split into terms
(the executor stood in by a summary with known times)."""

from __future__ import annotations

import pytest

from stalesim.plan.candidates import Candidate
from stalesim.plan.check import check_rows, markdown, pick
from stalesim.plan.compose import compose
from stalesim.plan.convergence import Convergence, Interval, Target
from stalesim.plan.timing import Timing
from stalesim.runtime.config import TrainConfig


def _rows():
    a = Candidate("stale", devices=2, stages=2)
    a2 = Candidate("stale", devices=2, stages=2, warmup=5)
    b = Candidate("pipedream", devices=2, stages=2)
    c = Candidate("sequential", devices=1, stages=1)
    convs = {x: Convergence([40, 44], 100, "reached", Interval(42, 40, 44, 2)) for x in (a, a2, b, c)}
    t = {a: Timing(0, 0.0, 0.1, 0.5, (1, 1)), a2: Timing(5, 0.2, 0.1, 0.5, (1, 1)),
         b: Timing(0, 0.0, 0.2, 0.5, (1, 1)), c: Timing(0, 0.0, 0.3, 0.0, (1,))}
    return compose([a, a2, b, c], convs, t, time_error=0.1, capacity_bytes=None)


def test_pick_takes_the_best_row_of_each_schedule_on_the_devices() -> None:
    picked = pick(_rows(), 3, 2)
    assert [r.candidate.label for r in picked] == ["stale S=2 sgd", "pipedream S=2 sgd"]
    assert [r.candidate.schedule for r in pick(_rows(), 3, 1)] == ["sequential"]


def test_check_error_and_its_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    from stalesim import executor

    runs = []

    def fake_run_local(job, devices, **kw):
        runs.append((job["train"]["schedule"], job["train"]["iterations"], devices))
        # 40 iterations: losses fall below 1.0 at the 40th; measured steady 0.12 s, wall 5.5 s
        return {"losses": [2.0] * 39 + [0.5], "wall_s": 5.5, "iteration_time_s": 0.12, "setup_s": 3.0}

    monkeypatch.setattr(executor, "run_local", fake_run_local)
    base = TrainConfig(model="lenet5", dataset="synthetic", iterations=1)
    rec = check_rows(pick(_rows(), 1, 2), base, Target("loss", 1.0, smooth=1), 0, devices=2)[0]
    assert runs == [("stale", 40, "cpu:2")]
    assert rec["same_iteration"] and rec["executor_iterations_to_target"] == 40
    assert rec["predicted_s"] == pytest.approx(0.5 + 40 * 0.1)  # seed 0's 40 iterations
    assert rec["error"] == pytest.approx((4.5 - 5.5) / 5.5)
    assert rec["iteration_term_s"] == pytest.approx(40 * (0.1 - 0.12))
    assert rec["rest_term_s"] == pytest.approx(-1.0 + 0.8)
    assert rec["dominant_term"] == "iteration time" and not rec["within_goal"]
    assert "| stale S=2 sgd | 40 | 40 | 4.50 | 5.50 | -18.2 % |" in markdown([rec])


def test_a_run_that_misses_the_target_has_no_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor's losses never fall below the target in the emulated 40 iterations: the
    record refuses an error (the wall time is not a time to target) and is not within the goal."""
    from stalesim import executor

    def fake_run_local(job, devices, **kw):
        # measured 4.5 s would match the prediction exactly: still no time to report
        return {"losses": [2.0] * 40, "wall_s": 4.5, "iteration_time_s": 0.1, "setup_s": 3.0}

    monkeypatch.setattr(executor, "run_local", fake_run_local)
    base = TrainConfig(model="lenet5", dataset="synthetic", iterations=1)
    rec = check_rows(pick(_rows(), 1, 2), base, Target("loss", 1.0, smooth=1), 0, devices=2)[0]
    assert rec["executor_iterations_to_target"] is None
    assert rec["reached"] is False and rec["error"] is None and rec["within_goal"] is False
    line = markdown([rec]).splitlines()[2]
    assert line.startswith("| stale S=2 sgd | 40 | - | 4.50 | not reached | did not reach the target in 40 |")
