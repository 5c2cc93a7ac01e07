"""The demo's validation estimate: its size times measured costs, refined per round."""

from __future__ import annotations

import pytest

from stalesim.cli import demo_eta
from stalesim.cli.demo_eta import RoundClock, fmt_eta, validate_estimate_s


def test_estimate_counts_every_run_step_and_start() -> None:
    # 3 rounds of (7 schedules + baseline) x 12 iterations + 7 x 3 emulated = 309 steps
    s = validate_estimate_s(step_s=0.5, start_s=10.0, schedules=7, iterations=12, repeats=3,
                            emulate_iterations=3)
    assert s == pytest.approx(309 * 0.5 + 3 * 10.0)
    assert validate_estimate_s(step_s=1.0, start_s=0.0, schedules=1, iterations=1, repeats=1,
                               emulate_iterations=0) == pytest.approx(2.0)


def test_fmt_eta() -> None:
    assert fmt_eta(0.2) == "about 1 s" and fmt_eta(44.4) == "about 44 s"
    assert fmt_eta(121) == "about 3 min" and fmt_eta(240) == "about 4 min"
    assert fmt_eta(40, lead="at least") == "at least 40 s"


def test_round_clock_projects_the_remaining_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(demo_eta.time, "perf_counter", lambda: now[0])
    said: list[str] = []
    clock = RoundClock(said.append)
    now[0] = 130.0  # the baseline and calibrations before the rounds do not count
    clock("running 2 schedule(s)")
    now[0] = 220.0
    clock("[validate 4/7] round 1/3 done")
    assert said[-1] == "1 of 3 rounds in 90 s: about 3 min more for the rounds, then the comparison"
    now[0] = 310.0
    clock("[validate 4/7] round 3/3 done")  # the last round: nothing left to project
    assert said == ["running 2 schedule(s)", "[validate 4/7] round 1/3 done", said[2],
                    "[validate 4/7] round 3/3 done"]
