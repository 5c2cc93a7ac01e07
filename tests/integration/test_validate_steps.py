"""validate's steps on synthetic inputs: the configs every consumer shares, and the
simulate -> compare path fed a "measurement" that is the simulated timeline itself
(zero time error, zero replay error: the comparison adds nothing of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _validate_fakes import PassCounter

from stalesim.devices import parse_devices
from stalesim.schedule import build_schedule, get_spec
from stalesim.sim.model import SimHardware
from stalesim.validate.config import ValidateConfig
from stalesim.validate.costmodel import CostModel
from stalesim.validate.steps import (
    Validation,
    compare_step,
    profile_sizes,
    round_order,
    simulate_step,
    train_config,
)
from stalesim.workloads.profile import uniform_profile


def test_profile_sizes_cover_every_action_batch() -> None:
    assert profile_sizes(64, 4, 2) == [64, 16, 32]
    assert profile_sizes(32, 1, 1) == [32]
    assert profile_sizes(8, 8, 2) == [8, 1, 4]


@pytest.mark.parametrize("name", ["stale", "gpipe", "dp", "hybrid"])
def test_train_config_shares_the_partition_and_the_switch(name: str) -> None:
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=12, batch_size=32, microbatches=4)
    tc = train_config(cfg, name, 2, [2], 12)
    spec = get_spec(name)
    assert tc.workers == (2 if spec.data_parallel else 1)
    assert tc.ppv == (None if spec.data_parallel else [2])
    emu = train_config(cfg, name, 2, [2], 5)  # the emulation checks a prefix of the same run
    assert emu.switch == tc.switch == (6 if spec.switches else None)
    a, b = build_schedule(tc.schedule_config(12)), build_schedule(emu.schedule_config(5))
    assert a.versions.v_f(0, 3, 0 if a.uses_micro else None) == b.versions.v_f(0, 3, 0 if b.uses_micro else None)


def _rows_from(result) -> dict[str, list[list]]:
    """The simulated timeline in the executor's row format (label, kind, stage, batch, micro,
    worker, start_s, end_s), per device."""
    tl = result.timeline
    rows: dict[str, list[list]] = {}
    for gid, a in enumerate(tl.program.actions):
        d = tl.program.device_of_gid[gid]
        rows.setdefault(str(d), []).append([str(a.with_version(None)), a.kind.value, a.stage, a.batch,
                                            a.micro, a.worker, tl.start[gid] / 1e9, tl.end[gid] / 1e9])
    return rows


@pytest.mark.parametrize("drawn", [False, True])
def test_simulated_timeline_as_measurement_gives_zero_error(tmp_path: Path, monkeypatch, drawn: bool) -> None:
    """The prediction's own timeline taken as the measurement: every error is zero. With the
    stage timing's spread the prediction is one drawn run (exact still), and the replay draws
    from that run's own spread, so it lands near it, not on it; at mean costs it is exact.

    The stage times are given, with a fixed spread, not timed: a timed spread is this machine's
    noise of the moment, and a loaded machine's (one CI run's) moved the replay 6.9% from the
    run it replays, past the bound."""
    import stalesim.validate.costmodel as cm_mod
    from stalesim.validate.stagetime import StageTimes, layout_key

    if not drawn:
        monkeypatch.setattr(cm_mod, "MIN_JITTER_SAMPLES", 10**9)  # no kind has that many: the means
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=16, batch_size=32, microbatches=4,
                         out=str(tmp_path))
    cfg.overhead = False  # the stage times given below, none timed
    prof = uniform_profile(6, 1e-3, 2e-3, 32, param_bytes=1000, output_bytes=100, saved_bytes=100)
    cm = CostModel(prof)
    spread = (0.85, 1.1, 0.95, 1.2, 1.0, 0.9, 1.05, 0.95)  # a round's time over its pass's mean
    for name in ("stale", "1f1b"):
        tc = train_config(cfg, name, 2, [3], cfg.iterations)
        key = layout_key(build_schedule(tc.schedule_config(cfg.iterations)), [3], cfg.batch_size)
        cm.stage_times[key] = StageTimes([{"F": 3e-3, "B": 6e-3}, {"F": 3e-3, "B": 6e-3, "LOSS": 1e-4}],
                                         round_ratios={"F": spread, "B": spread[::-1]})
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["stale", "1f1b"], out=tmp_path,
                   say=lambda _m: None, prof=prof, cm=cm, hw=SimHardware.ideal())
    base_tc = train_config(cfg, "sequential", 1, [], cfg.iterations)
    v.base_sched = build_schedule(base_tc.schedule_config(cfg.iterations))
    simulate_step(v)
    assert v.ppv == [3] and set(v.sims) == {"stale", "1f1b"}
    assert (tmp_path / "traces" / "stale.sim.json").exists()
    for name, r in v.sims.items():
        assert r.schedule_fingerprint == v.sim_info[name]["schedule"].fingerprint()
        v.measured[name] = {"rows": _rows_from(r), "iterations": cfg.iterations, "schedule": name,
                            "peak_memory_bytes": {str(d): b for d, b in enumerate(r.peak_memory_bytes)},
                            "losses": [1.0] * cfg.iterations}
        v.emulated[name] = [1.0] * 4
    v.base_timing = {"iteration_time_s": v.base_sim.iteration_time_s}
    compare_step(v)
    for row in v.rows:
        assert row["time_error"] == pytest.approx(0.0, abs=1e-9), row["schedule"]
        # drawn: the replay draws anew from the run's spread, a few percent from the one drawn
        # run it replays: held to the replay goal, 5%
        assert row["replay_time_error"] == pytest.approx(0.0, abs=0.05 if drawn else 1e-9), row["schedule"]
        assert bool(row["jitter_draws_s"]) == drawn
        assert row["speedup_error"] == pytest.approx(0.0, abs=1e-9)
        assert row["max_loss_rel_diff"] == 0.0


def test_round_order_rotates_every_schedule_once_per_round() -> None:
    names = ["a", "b", "c"]
    rounds = [round_order(names, k) for k in range(4)]
    assert rounds == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(sorted(r) == names for r in rounds)
    assert [r[0] for r in rounds[:3]] == names  # no schedule is always first
    assert round_order([], 2) == []


def _scaled(rows: dict[str, list[list]], f: float) -> dict[str, list[list]]:
    return {d: [r[:6] + [r[6] * f, r[7] * f] for r in rs] for d, rs in rows.items()}


def test_repeats_compare_the_prediction_with_the_median(tmp_path: Path, monkeypatch) -> None:
    """Three repeats at 0.9x, 1.0x and 1.3x the simulated timeline: the measured time is
    the 1.0x one, the noise floor IQR/median = (1.15-0.95)/1.0, the error 0 and within noise;
    the replay of each repeat is itself exact (action times at their means: drawn ones are
    the zero-error test's), and the speed-up uses the median baseline."""
    import stalesim.validate.costmodel as cm_mod
    from stalesim.validate.stagetime import StageTimes, layout_key

    monkeypatch.setattr(cm_mod, "MIN_JITTER_SAMPLES", 10**9)  # no kind has that many: the means
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=16, batch_size=32, microbatches=4,
                         out=str(tmp_path), repeats=3)
    prof = uniform_profile(6, 1e-3, 2e-3, 32, param_bytes=1000, output_bytes=100, saved_bytes=100)
    cm = CostModel(prof)
    # both layouts' stage times given, as the run step leaves them (it times every layout
    # between its rounds): the simulate step then times none, and the measurement below is
    # the simulated timeline scaled, so what the stage times are does not enter the asserts
    base_tc = train_config(cfg, "sequential", 1, [], cfg.iterations)
    for tc, ppv, stages in ((train_config(cfg, "1f1b", 2, [3], cfg.iterations), [3],
                             [{"F": 3e-3, "B": 6e-3}, {"F": 3e-3, "B": 6e-3, "LOSS": 1e-4}]),
                            (base_tc, None, [{"F": 6e-3, "B": 1.2e-2, "LOSS": 1e-4}])):
        cm.stage_times[layout_key(build_schedule(tc.schedule_config(cfg.iterations)), ppv,
                                  cfg.batch_size)] = StageTimes(stages)
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["1f1b"], out=tmp_path,
                   say=lambda _m: None, prof=prof, cm=cm, hw=SimHardware.ideal())
    v.base_sched = build_schedule(base_tc.schedule_config(cfg.iterations))
    simulate_step(v)
    assert v.ppv == [3] and len(v.cm.stage_times) == 2  # no layout left to time
    r = v.sims["1f1b"]
    rows = _rows_from(r)
    v.runs["1f1b"] = [{"rows": _scaled(rows, f), "iterations": cfg.iterations, "schedule": "1f1b",
                       "losses": [1.0] * cfg.iterations, "run_dir": f"r{f}"} for f in (0.9, 1.3, 1.0)]
    base_rows = _rows_from(v.base_sim)
    v.base_runs = [{"rows": _scaled(base_rows, f), "iterations": cfg.iterations} for f in (1.0, 2.0, 1.1)]
    v.base_timing = {"iteration_time_s": None}
    compare_step(v)
    (row,) = v.rows
    assert row["repeats"] == 3 and row["run_dir"] == "r1.0"
    assert row["measured_iteration_time_s"] == pytest.approx(r.iteration_time_s)
    assert row["time_error"] == pytest.approx(0.0, abs=1e-9)
    assert row["noise_floor"] == pytest.approx(0.2, rel=1e-6)
    assert row["time_error_within_noise"] is True
    assert len(row["replay_time_errors"]) == 3
    assert all(abs(e) < 1e-6 for e in row["replay_time_errors"])
    assert row["measured_speedup"] == pytest.approx(1.1 * v.base_sim.iteration_time_s / r.iteration_time_s)
    assert v.base_timing["noise_floor"] == pytest.approx((1.55 - 1.05) / 1.1)


def test_run_step_interleaves_rounds_with_the_baseline(tmp_path: Path, monkeypatch) -> None:
    """K rounds: each runs the 1-rank baseline (round 0's ran in the baseline step), then
    every schedule once in one process group, rotated; each repeat has its own folder."""
    import stalesim.executor.launch
    from stalesim.validate.steps import run_step

    calls: list[list[str]] = []

    def fake_run_local(jobs, devs, **_kw):
        single = isinstance(jobs, dict)
        js = [jobs] if single else jobs
        calls.append([f"{j['label']}@{Path(j['out']).name}" for j in js])
        res = [{"label": j["label"], "run_dir": j["out"]} for j in js]
        return res[0] if single else res

    monkeypatch.setattr(stalesim.executor.launch, "run_local", fake_run_local)
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16, out=str(tmp_path),
                         repeats=3, overhead=False)
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["stale", "dp"], out=tmp_path,
                   say=lambda _m: None, ppv=[2], ppvs={"stale": [2], "dp": []})
    v.base_runs = [{"label": "baseline", "run_dir": "round 0"}]  # the baseline step's
    run_step(v)
    assert calls == [["stale@stale", "dp@dp"],
                     ["baseline@baseline-1rank.r1"], ["dp@dp.r1", "stale@stale.r1"],
                     ["baseline@baseline-1rank.r2"], ["stale@stale.r2", "dp@dp.r2"]]
    assert [m["run_dir"] for m in v.runs["dp"]] == [str(tmp_path / "runs" / n) for n in ("dp", "dp.r1", "dp.r2")]
    assert len(v.base_runs) == 3  # round 0's (the baseline step's), then rounds 1 and 2


def test_stage_layouts_are_timed_after_every_round_and_feed_the_cost_model(tmp_path: Path, monkeypatch) -> None:
    """One timing pass after each round of runs, every layout of the runs and the baseline in
    it (layouts that schedules share once); the pooled times land in the cost model."""
    import stalesim.executor.launch
    import stalesim.validate.steps as steps_mod

    events: list[str] = []

    def fake_run_local(jobs, devs, **_kw):
        js = [jobs] if isinstance(jobs, dict) else jobs
        events.extend(f"run {j['label']}" for j in js)
        res = [{"label": j["label"], "run_dir": j["out"]} for j in js]
        return res[0] if isinstance(jobs, dict) else res

    def fake_pass(v, timer):
        timer.passes += 1
        events.append(f"time {len(timer.tcs)} layouts")

    monkeypatch.setattr(stalesim.executor.launch, "run_local", fake_run_local)
    monkeypatch.setattr("stalesim.validate.stagetime.LayoutTimer", PassCounter)
    monkeypatch.setattr(steps_mod, "_time_pass", fake_pass)
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16, microbatches=4,
                         out=str(tmp_path), repeats=2)
    prof = uniform_profile(6, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=100)
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["gpipe", "1f1b", "stale"], out=tmp_path,
                   say=lambda _m: None, prof=prof, cm=CostModel(prof), base_runs=[{}])
    steps_mod.run_step(v)
    # gpipe and 1f1b share a layout; stale's is hooked; the baseline's is one stage
    assert events == ["run gpipe", "run 1f1b", "run stale", "time 3 layouts",
                      "run baseline", "run 1f1b", "run stale", "run gpipe", "time 3 layouts"]
    assert v.ppv == [3] and len(v.cm.stage_times) == 3
    assert all(t.mean_s == [{"F": 2.0}] for t in v.cm.stage_times.values())


def test_each_timing_pass_gives_a_prediction_and_their_spread_is_the_prediction_noise(tmp_path: Path) -> None:
    """Stage times kept per pass: one prediction per pass, the slow pass's the slowest, their
    interquartile range over median in the row; without passes, none."""
    from stalesim.validate.compare import noise_floor
    from stalesim.validate.stagetime import StageTimes, layout_key

    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=16, batch_size=32, microbatches=4,
                         out=str(tmp_path))
    prof = uniform_profile(6, 1e-3, 2e-3, 32, param_bytes=1000, output_bytes=100, saved_bytes=100)

    def stages(f: float) -> list[dict[str, float]]:
        return [{"F": 1e-3 * f, "B": 2e-3 * f}, {"F": 1e-3 * f, "B": 2e-3 * f, "LOSS": 1e-4}]

    def validation(times: StageTimes | None) -> Validation:
        cm = CostModel(prof)
        v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["1f1b"], out=tmp_path,
                       say=lambda _m: None, prof=prof, cm=cm, hw=SimHardware.ideal())
        tc = train_config(cfg, "1f1b", 2, [3], cfg.iterations)
        if times is not None:
            cm.stage_times[layout_key(build_schedule(tc.schedule_config(cfg.iterations)), [3], 32)] = times
        v.base_sched = build_schedule(train_config(cfg, "sequential", 1, [], cfg.iterations)
                                      .schedule_config(cfg.iterations))
        cfg.overhead = False  # the stage times given here, none timed
        simulate_step(v)
        return v

    v = validation(StageTimes(stages(1.2), pass_means_s=[stages(1.0), stages(1.0), stages(1.6)]))
    got = v.sim_info["1f1b"]["pass_predictions_s"]
    assert len(got) == 3 and got[0] == pytest.approx(got[1]) and got[2] > 1.4 * got[0]
    # the prediction itself is made from the pooled means (1.2x), between the passes'
    assert got[0] * 1.1 < v.sims["1f1b"].iteration_time_s < got[2] * 0.9
    v.runs["1f1b"] = [{"rows": _rows_from(v.sims["1f1b"]), "iterations": cfg.iterations, "schedule": "1f1b",
                       "losses": [1.0] * cfg.iterations}]
    v.base_timing = {"iteration_time_s": v.base_sim.iteration_time_s}
    compare_step(v)
    (row,) = v.rows
    assert row["predicted_pass_times_s"] == got and row["prediction_noise"] == pytest.approx(noise_floor(got))
    assert row["prediction_noise"] > 0.1
    assert validation(StageTimes(stages(1.2))).sim_info["1f1b"]["pass_predictions_s"] == []
