"""experiments/bench_replay_jitter.py: the replay at mean costs and drawn, on simulated runs."""

from __future__ import annotations

import statistics

import pytest

from experiments.bench_replay_jitter import main, replays, summarize
from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim import SimOptions, simulate
from stalesim.sim.jitter import ActionJitter
from stalesim.sim.model import SimHardware, uniform_costs
from stalesim.validate.measured import measured_timing

US = 1000
ITER = 24


def _measured(jitter: ActionJitter | None) -> tuple:
    """A simulated 1f1b run on 2 devices as the executor's rows, its steady window and time."""
    cfg = ScheduleConfig("1f1b", stages=2, batches=ITER, microbatches=4)
    sched = build_schedule(cfg)
    costs = uniform_costs(2, 3000 * US, 6000 * US, 200 * US, msg_bytes=10_000, param_bytes=40_000,
                          batch_size=32, action_batch=8)
    r = simulate(costs, sched, SimHardware.ideal(), SimOptions(jitter=jitter))
    tl = r.timeline
    rows: dict[str, list[list]] = {}
    for gid, a in enumerate(tl.program.actions):
        rows.setdefault(str(tl.program.device_of_gid[gid]), []).append(
            [str(a.with_version(None)), a.kind.value, a.stage, a.batch, a.micro, a.worker,
             tl.start[gid] / 1e9, tl.end[gid] / 1e9])
    mt = measured_timing({"rows": rows, "iterations": ITER}, sched)
    return costs, sched, rows, tuple(mt["window_s"]), mt["iteration_time_s"]


def test_a_run_without_spread_replays_the_same_both_ways() -> None:
    costs, sched, rows, w, m = _measured(None)
    mean, drawn = replays(costs, sched, SimHardware.ideal(), rows, w)
    assert mean == pytest.approx(m, rel=0.02) and drawn == mean  # every ratio is 1: nothing to draw


def test_a_run_with_spread_is_replayed_closer_when_drawn() -> None:
    """Runs whose actions were drawn: at mean costs the replay is optimistic, drawn it is not."""
    j = ActionJitter({"F": (0.5, 1.5), "B": (0.6, 1.4)})
    rows = []
    for seed in range(6):
        costs, sched, rr, w, m = _measured(j.with_seed(100 + seed))
        mean, drawn = replays(costs, sched, SimHardware.ideal(), rr, w)
        rows.append({"mean_error": (mean - m) / m, "drawn_error": (drawn - m) / m})
    s = summarize(rows)
    assert s["mean"]["signed_median"] < -0.02 and s["mean"]["negative"] == 6
    assert abs(s["drawn"]["signed_median"]) < abs(s["mean"]["signed_median"]) / 2
    assert statistics.median(abs(r["drawn_error"]) for r in rows) < s["mean"]["median_abs_error"]


def test_bad_input_is_one_error_line(tmp_path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_replay_jitter: error: folder: ")
    assert "summary.json" in err[0]
