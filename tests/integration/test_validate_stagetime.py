"""Stage times: measured per stage layout on the real stages, and how the cost model uses them."""

from __future__ import annotations

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim.model import SimHardware, to_ns
from stalesim.validate.config import ValidateConfig
from stalesim.validate.costmodel import CostModel, simulate_with_costs, stage_costs_for
from stalesim.validate.stagetime import (
    LayoutKey,
    StageTimes,
    layout_key,
    measure_layouts,
    measure_stage_times,
    stage_times_from_summary,
)
from stalesim.validate.steps import train_config
from stalesim.workloads.profile import Profile, uniform_profile

US = 1000
TINY_GPT = "gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8"


def _profile(forward_s: float = 1e-3, backward_s: float = 2e-3) -> Profile:
    return uniform_profile(4, forward_s, backward_s, 32, param_bytes=4000, output_bytes=10_000, saved_bytes=100)


def _tc(name: str, n: int, ppv: list[int], model: str = "lenet5", batch: int = 16) -> object:
    return train_config(ValidateConfig(model=model, batch_size=batch, dataset="synthetic"), name, n, ppv, 8)


def test_layout_key_names_what_the_times_depend_on() -> None:
    stale = build_schedule(ScheduleConfig("stale", stages=2, batches=8))
    k = layout_key(stale, [2], 32)
    assert k == LayoutKey((2,), 32, (False, False), (True, False), False)
    assert k.text() == "ppv=[2] batch=32 stages=h-"
    zb = build_schedule(ScheduleConfig("zb-h1", stages=2, batches=8, microbatches=4))
    kz = layout_key(zb, [2], 32)
    assert kz.action_batch == 8 and kz.split == (True, True)
    # 1F1B and GPipe cut the same way run the same stages: one measurement serves both
    g = build_schedule(ScheduleConfig("gpipe", stages=2, batches=8, microbatches=4))
    o = build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=4))
    assert layout_key(g, [2], 32) == layout_key(o, [2], 32) != kz
    assert LayoutKey.from_dict(kz.to_dict()) == kz


@pytest.mark.parametrize(("name", "n", "ppv", "kinds"), [
    ("pipedream", 2, [2], [{"F", "B", "DATA"}, {"F", "B", "LOSS"}]),
    ("zb-h1", 2, [2], [{"F", "B", "I", "W", "DATA"}, {"F", "B", "I", "W", "LOSS"}]),
    ("local", 2, [2], [{"F", "B", "LOSS", "DATA"}, {"F", "B", "LOSS"}]),
    ("dp", 2, [], [{"F", "B", "LOSS", "DATA"}]),
])
def test_every_stage_is_timed_as_its_run_runs_it(name: str, n: int, ppv: list[int], kinds: list[set[str]]) -> None:
    st = measure_stage_times(_tc(name, n, ppv), rounds=4, fresh_process=False)
    assert [set(m) for m in st.mean_s] == [set(m) for m in st.median_s] == kinds
    assert all(v > 0 for m in st.mean_s for v in m.values())
    assert all(lo <= m[k] <= hi for m, q in zip(st.median_s, st.quartiles_s) for k, (lo, hi) in q.items())
    back = StageTimes.from_dict(st.to_dict())
    assert back.mean_s == st.mean_s and back.median_s == st.median_s


def test_the_char_gpt_is_timed_with_token_ids_in_a_fresh_process() -> None:
    st = measure_stage_times(_tc("1f1b", 2, [2], model=TINY_GPT, batch=4), rounds=2)
    assert len(st.mean_s) == 2 and st.mean_s[1]["LOSS"] > 0 and st.mean_s[0]["DATA"] > 0


def test_layouts_are_timed_in_interleaved_passes_whose_samples_are_pooled() -> None:
    a, b = measure_layouts([_tc("gpipe", 2, [2]), _tc("zb-h1", 2, [1])], passes=2, rounds=2)
    assert a.rounds == 4 and [set(m) for m in a.mean_s] == [{"F", "B", "DATA"}, {"F", "B", "LOSS"}]
    assert {"I", "W"} <= set(b.mean_s[0]) and b.rounds == 4  # F every round; B and I/W alternate


def test_from_samples_takes_means_medians_and_quartiles() -> None:
    st = StageTimes.from_samples([{"F": [3.0, 1.0, 2.0, 10.0], "DATA": [0.5]}, {"B": [4.0, 4.0]}])
    assert st.mean_s == [{"F": 4.0, "DATA": 0.5}, {"B": 4.0}] and st.rounds == 4
    assert st.median_s == [{"F": 2.5, "DATA": 0.5}, {"B": 4.0}]
    assert st.quartiles_s[0]["F"][0] <= 2.5 <= st.quartiles_s[0]["F"][1]


def test_measured_times_replace_the_profile_sums_and_its_overhead() -> None:
    cm = CostModel(_profile(), overhead_s={"F": 5e-4, "B": 5e-4, "U": 0.0, "LOSS": 5e-4, "I": 0.0, "W": 0.0})
    before = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32)
    assert before.f_ns == (to_ns(2.5e-3),) * 2  # two layers' 1 ms + the runtime overhead
    times = StageTimes([{"F": 1.5e-3, "B": 3e-3, "DATA": 1e-4}, {"F": 0.7e-3, "B": 6e-3, "LOSS": 2e-4}])
    c = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, times=times)
    assert c.f_ns == (to_ns(1.6e-3), to_ns(0.7e-3))  # stage 0 reads its data in F
    assert c.b_ns == (to_ns(3e-3), to_ns(6e-3))
    assert c.loss_ns == to_ns(2e-4) and c.u_ns == before.u_ns  # the update stays the profile's


def test_contention_scales_the_measured_time_by_the_profiles_ratio() -> None:
    cm = CostModel(_profile(), contended=_profile(forward_s=1.5e-3, backward_s=2e-3))
    times = StageTimes([{"F": 4e-3, "B": 3e-3}, {"F": 4e-3, "B": 3e-3, "LOSS": 1e-4}])
    c = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[1.0, 0.5], times=times)
    assert c.f_ns == (to_ns(6e-3), to_ns(5e-3))  # x1.5 when always contended, half of it at phi 0.5
    assert c.b_ns == (to_ns(3e-3),) * 2  # the profile's backward is not slower with co-runners


def test_simulation_uses_the_times_of_its_own_layout_only() -> None:
    cfg = ScheduleConfig("gpipe", stages=2, batches=4, microbatches=2)
    sched = build_schedule(cfg)
    cm = CostModel(_profile())
    slow = StageTimes([{"F": 0.1, "B": 0.2}, {"F": 0.1, "B": 0.2, "LOSS": 0.0}])
    base, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    cm.stage_times[layout_key(sched, [3], 32)] = slow  # another cut: not this run's
    assert simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)[0].iteration_time_s == base.iteration_time_s
    cm.stage_times[layout_key(sched, [2], 32)] = slow
    r, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    assert r.iteration_time_s > 10 * base.iteration_time_s


def test_stage_times_round_trip_through_the_summary() -> None:
    cm = CostModel(_profile())
    key = LayoutKey((2,), 16, (True, False), (False, False), False)
    cm.stage_times[key] = StageTimes([{"F": 1e-3, "I": 1e-3, "W": 2e-3}, {"F": 1e-3, "B": 1e-3}],
                                     [{"F": 0.9e-3}, {}], [{"F": (0.9e-3, 1.1e-3)}, {}], 12)
    back = stage_times_from_summary(cm.to_dict()["stage_times"])
    assert back[key] == cm.stage_times[key]


def _hw() -> SimHardware:
    return SimHardware(device="x", link="l", latency_ns=1000, bandwidth_Bps=1e9)


class _FakeCoRunners:
    """Records pause/resume; ``busy`` is what a timed process would see."""

    def __init__(self) -> None:
        self.busy = False
        self.calls: list[str] = []

    def pause(self) -> None:
        self.busy = False
        self.calls.append("pause")

    def resume(self) -> None:
        self.busy = True
        self.calls.append("resume")


def test_a_pass_times_every_layout_alone_and_contended(monkeypatch) -> None:
    """Each layout twice per pass, in a fresh process each: alone with the co-runners paused
    (reading the data too) and contended with them computing; which first alternates over
    layouts and passes; the samples of the passes pool per mode."""
    import stalesim.validate.stagetime as st_mod

    co = _FakeCoRunners()
    seen: list[tuple[str, bool, bool]] = []

    def fake_sample(tc, device, threads, rounds, full_batch, data=True, *, ranks=1, waits=(), pass_index=0):
        assert ranks == 2  # each timing process is pinned as the first of the runs' ranks
        assert bool(waits) == co.busy  # the after-wait rounds run while the co-runners compute
        seen.append((tc, co.busy, data))
        f = 2.0 if co.busy else 1.0
        out = [{"F": [f] * rounds}, {"F": [f] * rounds, "LOSS": [0.25] * rounds}]
        if data:
            out[0]["DATA"] = [0.5]
        return out, {w: [{"F": [f * (1 + w)]}, {"F": [f * (1 + w)]}] for w in waits}

    monkeypatch.setattr(st_mod, "_sample_fresh", fake_sample)
    timer = st_mod.LayoutTimer(["a", "b"], rounds=3, ranks=2)
    timer.run_pass(co)
    timer.run_pass(co)
    assert seen == [("a", False, True), ("a", True, False), ("b", True, False), ("b", False, True),
                    ("b", False, True), ("b", True, False), ("a", True, False), ("a", False, True)]
    assert co.calls[-1] == "pause" and not co.busy  # left paused for the runs
    a, b = timer.times()
    assert a.rounds == 6 and a.mean_s == [{"F": 1.0, "DATA": 0.5}, {"F": 1.0, "LOSS": 0.25}]
    assert a.contended is not None and a.contended.mean_s == [{"F": 2.0}, {"F": 2.0, "LOSS": 0.25}]
    assert a.contended.wait_ratios() == {"F": [(w, pytest.approx(1 + w)) for w in st_mod.WAITS_S]}
    assert not a.after_wait  # alone: back to back only
    back = StageTimes.from_dict(a.to_dict())
    assert back == a
    timer.run_pass()  # no co-runners (a GPU rank): alone only
    assert [m for _tc, m, _d in seen[8:]] == [False, False]


def test_each_pass_keeps_its_own_means(monkeypatch) -> None:
    """Besides the pooled samples, every pass's per-stage means are kept, alone and contended,
    in pass order, and survive summary.json's round trip: a slow pass stays visible as one."""
    import stalesim.validate.stagetime as st_mod

    co = _FakeCoRunners()
    calls = {"n": 0}

    def fake_sample(tc, device, threads, rounds, full_batch, data=True, *, ranks=1, waits=(), pass_index=0):
        calls["n"] += 1
        f = (2.0 if co.busy else 1.0) * (1 + pass_index)  # pass p runs (1 + p)x slower
        return [{"F": [f, 3 * f]}, {"B": [f] * rounds}], {}

    monkeypatch.setattr(st_mod, "_sample_fresh", fake_sample)
    timer = st_mod.LayoutTimer(["a"], rounds=2, ranks=2)
    for _ in range(3):
        timer.run_pass(co)
    (a,) = timer.times()
    assert calls["n"] == 6
    assert a.pass_means_s == [[{"F": 2.0 * (1 + p)}, {"B": 1.0 * (1 + p)}] for p in range(3)]
    assert a.contended is not None
    assert a.contended.pass_means_s == [[{"F": 4.0 * (1 + p)}, {"B": 2.0 * (1 + p)}] for p in range(3)]
    assert a.mean_s == [{"F": 4.0}, {"B": 2.0}]  # the pooled means are unchanged by keeping them
    back = StageTimes.from_dict(a.to_dict())
    assert back == a and back.contended.pass_means_s == a.contended.pass_means_s
    assert "pass_means_s" not in StageTimes([{"F": 1.0}]).to_dict()  # absent when not timed in passes


def test_pass_medians_leave_out_a_slow_pass_and_keep_the_wait_ratios() -> None:
    """One pass 2x slower moves the pooled mean, not the median over passes; the contended
    times get theirs, the after-wait ratios are unchanged, and under three passes nothing moves."""
    passes = [[{"F": 1.0, "B": 2.0}], [{"F": 1.2, "B": 2.2}], [{"F": 2.0, "B": 4.0}]]
    cont = StageTimes([{"F": 2.0}], pass_means_s=[[{"F": 1.5}], [{"F": 3.0}], [{"F": 1.5}]],
                      after_wait={0.025: StageTimes([{"F": 2.2}])})
    t = StageTimes([{"F": 1.4, "B": 2.73}], pass_means_s=passes, contended=cont)
    m = t.with_pass_medians()
    assert m.mean_s == [{"F": 1.2, "B": 2.2}]
    assert m.contended is not None and m.contended.mean_s == [{"F": 1.5}]
    assert m.contended.after_wait[0.025].mean_s[0]["F"] == pytest.approx(2.2 * 1.5 / 2.0)
    assert m.contended.wait_ratios()["F"][0] == pytest.approx(cont.wait_ratios()["F"][0])
    assert t.mean_s == [{"F": 1.4, "B": 2.73}]  # a new object; the pooled times stay
    two = StageTimes([{"F": 1.4}], pass_means_s=passes[:2])
    assert two.with_pass_medians().mean_s == two.mean_s


def test_of_pass_is_the_times_one_pass_measured() -> None:
    """Pass k's means, here and contended; a kind the pass lacks keeps the pooled mean."""
    passes = [[{"F": 1.0, "B": 2.0}], [{"F": 1.2}], [{"F": 2.0, "B": 4.0}]]
    cont = StageTimes([{"F": 2.0}], pass_means_s=[[{"F": 1.5}], [{"F": 3.0}], [{"F": 1.5}]])
    t = StageTimes([{"F": 1.4, "B": 3.0}], pass_means_s=passes, contended=cont)
    assert t.of_pass(0).mean_s == [{"F": 1.0, "B": 2.0}] and t.of_pass(0).contended.mean_s == [{"F": 1.5}]
    assert t.of_pass(1).mean_s == [{"F": 1.2, "B": 3.0}] and t.of_pass(1).contended.mean_s == [{"F": 3.0}]
    assert t.of_pass(7).mean_s == t.mean_s  # no such pass: the pooled times
    # every estimate keeps no passes, so estimating again changes nothing
    assert t.of_pass(2).pass_means_s == [] and t.of_pass(2).contended.pass_means_s == []
    assert t.of_pass(2).with_pass_medians() == t.of_pass(2) == t.of_pass(2).pooled()
    p = t.pooled()
    assert p.mean_s == t.mean_s and p.contended.mean_s == cont.mean_s and p.pass_means_s == []


def test_rounds_per_pass_spread_the_samples_over_the_passes() -> None:
    from stalesim.validate.stagetime import SAMPLES, rounds_per_pass

    assert rounds_per_pass(1) == SAMPLES
    assert rounds_per_pass(5) * 5 >= SAMPLES and rounds_per_pass(100) == 3


def test_contended_stage_times_are_the_contended_cost() -> None:
    """With stage times measured alongside co-runners, phi interpolates between the alone and
    the contended stage times (no contended profile needed); a contended time below the alone
    one is noise and floored at alone."""
    cm = CostModel(_profile())
    times = StageTimes([{"F": 4e-3, "B": 3e-3}, {"F": 4e-3, "B": 3e-3, "LOSS": 1e-4}],
                       contended=StageTimes([{"F": 5e-3, "B": 2e-3}, {"F": 6e-3, "B": 3.6e-3, "LOSS": 1e-4}]))
    c = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[1.0, 0.5], times=times)
    assert c.f_ns == (to_ns(5e-3), to_ns(5e-3))
    assert c.b_ns == (to_ns(3e-3), to_ns(3.3e-3))  # stage 0's faster contended B is floored
    alone = stage_costs_for(cm, [2], [2], batch_size=32, action_batch=32, phi=[0.0, 0.0], times=times)
    assert alone.f_ns == (to_ns(4e-3),) * 2


def test_contended_stage_times_drive_the_fixed_point_without_a_contended_profile() -> None:
    """A pipeline whose devices overlap pays the contended stage times; the sequential
    schedule (devices never overlap) pays the alone ones."""
    cm = CostModel(_profile())
    fast = StageTimes([{"F": 1e-3, "B": 2e-3}, {"F": 1e-3, "B": 2e-3, "LOSS": 0.0}])
    slow = StageTimes([{"F": 2e-3, "B": 4e-3}, {"F": 2e-3, "B": 4e-3, "LOSS": 0.0}])
    for name in ("pipedream", "sequential"):
        cfg = ScheduleConfig(name, stages=2, batches=16)
        key = layout_key(build_schedule(cfg), [2], 32)
        cm.stage_times[key] = fast
        plain, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
        cm.stage_times[key] = StageTimes(fast.mean_s, contended=slow)
        r, info = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
        if name == "pipedream":
            assert info["rounds"] > 1 and min(info["phi"]) > 0.9
            assert r.iteration_time_s == pytest.approx(2 * plain.iteration_time_s, rel=0.05)
        else:
            assert r.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-6)


def test_contention_ratio_sums_the_module_kinds_both_sides_measured() -> None:
    alone = [{"F": 1.0, "B": 2.0, "DATA": 9.0}, {"F": 1.0, "LOSS": 5.0}]
    busy = [{"F": 1.5, "B": 2.5}, {"F": 1.0, "LOSS": 50.0}]
    assert StageTimes(alone).contention_ratio() is None
    assert StageTimes(alone, contended=StageTimes(busy)).contention_ratio() == pytest.approx(5.0 / 4.0)


def test_after_wait_rounds_alternate_with_back_to_back_ones_and_leave_the_wait_out() -> None:
    """Each wait gets its rounds, the back-to-back samples keep theirs, and the sleep before an
    action is not in its time (a 50 ms wait; LeNet-5's actions take about a millisecond)."""
    from stalesim.validate.stagetime import _sample

    got, waited = _sample(_tc("1f1b", 2, [2]), "cpu", 1, 4, None, False, waits=(0.05, 0.01))
    assert [len(s["F"]) for s in got] == [4, 4]
    assert sorted(waited) == [0.01, 0.05]
    assert all(len(s["F"]) == 2 and len(s["B"]) == 2 for w in waited.values() for s in w)
    assert max(v for s in waited[0.05] for v in s["F"] + s["B"]) < 0.025
    plain, none = _sample(_tc("1f1b", 2, [2]), "cpu", 1, 2, None, False)
    assert none == {} and [len(s["F"]) for s in plain] == [2, 2]


def test_a_split_stage_times_b_and_i_then_w_in_every_sort_of_round() -> None:
    """A split stage alternates B with I-then-W within the back-to-back rounds and within each
    wait's rounds; alternating over all rounds at once gave every waited round I and W and
    every back-to-back one B, so no after-wait ratio of a split stage's backward existed."""
    from stalesim.validate.stagetime import _sample

    got, waited = _sample(_tc("zb-h1", 2, [2]), "cpu", 1, 4, None, False, waits=(0.002, 0.001))
    assert all({"B", "I", "W"} <= set(s) for s in got)
    assert all({"B", "I", "W"} <= set(s) for w in waited.values() for s in w)
    t = StageTimes.from_samples(got, got, contended_after_wait=waited)
    assert t.contended is not None and set(t.contended.wait_ratios()) == {"F", "B", "I", "W"}


def test_round_ratios_are_each_round_over_its_pass_mean_with_the_small_sample_correction() -> None:
    from stalesim.validate.stagetime import round_ratios

    got = round_ratios([{"F": [1.0, 3.0], "DATA": [1.0, 5.0]}, {"B": [2.0, 2.0, 2.0], "LOSS": [0.5]}])
    d = 0.5 * 2 ** 0.5  # deviation 0.5 of the mean, times sqrt(n / (n - 1)) for n = 2
    assert got["F"] == pytest.approx([1 - d, 1 + d])
    assert got["B"] == [1.0, 1.0, 1.0]
    assert "DATA" not in got and "LOSS" not in got  # the data read is F's; one round has no spread
    assert round_ratios([{"F": [0.1, 5.0, 5.0]}])["F"][0] == pytest.approx(0.05)  # floored (MIN_RATIO)
    # a round preempted for a time slice: kept at the bound, which ActionJitter.check accepts
    slow = round_ratios([{"B": [100.0] + [1.0] * 59}])["B"]
    assert slow[0] == 20.0 and all(0 < x <= 20.0 for x in slow)


def test_a_pass_keeps_its_round_ratios_free_of_the_drift_between_passes(monkeypatch) -> None:
    """Pass p runs (1 + p)x slower: the pooled times see the drift, the ratios do not; alone and
    contended keep their own, and both survive summary.json's round trip."""
    import stalesim.validate.stagetime as st_mod

    co = _FakeCoRunners()

    def fake_sample(tc, device, threads, rounds, full_batch, data=True, *, ranks=1, waits=(), pass_index=0):
        f = (1 + pass_index) * (2.0 if co.busy else 1.0)
        spread = [0.5, 1.5] if co.busy else [0.9, 1.1]
        return [{"F": [f * x for x in spread]}, {"B": [f] * rounds}], {}

    monkeypatch.setattr(st_mod, "_sample_fresh", fake_sample)
    timer = st_mod.LayoutTimer(["a"], rounds=2, ranks=2)
    for _ in range(3):
        timer.run_pass(co)
    (a,) = timer.times()
    c = 2 ** 0.5
    assert a.round_ratios["F"] == pytest.approx([1 - 0.1 * c, 1 + 0.1 * c] * 3)
    assert a.round_ratios["B"] == [1.0] * 6
    assert a.contended is not None and a.contended.round_ratios["F"] == pytest.approx([1 - 0.5 * c, 1 + 0.5 * c] * 3)
    back = StageTimes.from_dict(a.to_dict())
    assert back == a and back.contended.round_ratios == a.contended.round_ratios
    assert a.pooled().round_ratios == a.round_ratios and a.of_pass(1).contended.round_ratios == a.contended.round_ratios
    assert "round_ratios" not in StageTimes([{"F": 1.0}]).to_dict()


def test_the_prediction_is_the_median_of_drawn_runs_and_slower_where_devices_wait() -> None:
    """With a spread, a 2-device pipeline is predicted as the median of JITTER_DRAWS simulations
    with drawn action times (one simulated run, so its timeline agrees with its time), above
    the same costs at their means; one device never waits, so it is not drawn; a kind with
    too few rounds keeps its mean."""
    from stalesim.validate.costmodel import JITTER_DRAWS, MIN_JITTER_SAMPLES, action_jitter

    cm = CostModel(_profile())
    wide = [0.4, 1.6, 0.7, 1.3, 1.0, 1.0]
    times = StageTimes([{"F": 2e-3, "B": 4e-3}, {"F": 2e-3, "B": 4e-3, "LOSS": 0.0}],
                       round_ratios={"F": wide[:3], "B": wide[:3], "LOSS": [1.0]},
                       contended=StageTimes([{"F": 2e-3, "B": 4e-3}, {"F": 2e-3, "B": 4e-3, "LOSS": 0.0}],
                                            round_ratios={"F": wide[3:], "B": wide[3:]}))
    j = action_jitter(times)
    assert j is not None and sorted(j.ratios) == ["B", "F"]  # alone and contended pooled; LOSS too few
    assert sorted(j.ratios["F"]) == sorted(wide) and len(wide) >= MIN_JITTER_SAMPLES
    assert action_jitter(StageTimes([{"F": 1.0}])) is None
    cfg = ScheduleConfig("1f1b", stages=2, batches=16, microbatches=4)
    key = layout_key(build_schedule(cfg), [2], 32)
    cm.stage_times[key] = StageTimes(times.mean_s)  # no spread: the means
    plain, info0 = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    assert info0["jitter_draws_s"] == [] and info0["mean_costs_s"] == plain.iteration_time_s
    cm.stage_times[key] = times
    r, info = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    draws = info["jitter_draws_s"]
    assert len(draws) == JITTER_DRAWS and draws == sorted(draws)
    assert r.iteration_time_s == draws[JITTER_DRAWS // 2]
    assert info["mean_costs_s"] == pytest.approx(plain.iteration_time_s)
    assert r.iteration_time_s > 1.02 * plain.iteration_time_s
    assert info["jitter_spread"]["F"] == pytest.approx(j.spread()["F"])
    seq = ScheduleConfig("sequential", stages=1, batches=8)
    one = StageTimes([{"F": 4e-3, "B": 8e-3, "LOSS": 0.0}], round_ratios={"F": wide, "B": wide})
    cm.stage_times[layout_key(build_schedule(seq), [], 32)] = one
    r1, info1 = simulate_with_costs(cm, _hw(), seq, ppv=None, batch_size=32)
    assert info1["jitter_draws_s"] == [] and action_jitter(one) is not None
    assert r1.iteration_time_s == pytest.approx(4e-3 + 8e-3, rel=0.05)  # its stage times, at their means


def test_contention_is_pooled_over_the_layouts_at_one_action_batch() -> None:
    """Each layout's contended module-kind times become its alone times times the ratio pooled
    over every layout at its action batch; the LOSS keeps its own, the after-wait ratios stay."""
    from stalesim.validate.stagetime import contention_by_batch

    def key(batch: int, hooked: bool) -> LayoutKey:
        return LayoutKey((2,), batch, (False, False), (hooked, False), False)

    waited = StageTimes([{"F": 3.0, "B": 6.0}, {"F": 1.5}])
    a = StageTimes([{"F": 1.0, "B": 2.0}, {"F": 1.0, "LOSS": 0.5}],
                   contended=StageTimes([{"F": 1.0, "B": 2.0}, {"F": 1.0, "LOSS": 0.9}], after_wait={0.025: waited}))
    b = StageTimes([{"F": 1.0, "B": 2.0}, {"F": 1.0}], contended=StageTimes([{"F": 1.5, "B": 3.0}, {"F": 1.5}]))
    other = StageTimes([{"F": 4.0}], contended=StageTimes([{"F": 8.0}]))
    ratios = contention_by_batch({key(8, False): a, key(8, True): b, key(32, False): other,
                                  key(16, False): StageTimes([{"F": 1.0}])})
    assert ratios == {8: pytest.approx(10.0 / 8.0), 32: pytest.approx(2.0)}  # no contended times: no entry
    p = a.with_contention(ratios[8])
    assert p.contended.mean_s == [{"F": pytest.approx(1.25), "B": pytest.approx(2.5)},
                                  {"F": pytest.approx(1.25), "LOSS": 0.9}]
    assert p.mean_s == a.mean_s
    for k, curve in a.contended.wait_ratios().items():
        assert [r for _w, r in p.contended.wait_ratios()[k]] == pytest.approx([r for _w, r in curve])
    assert StageTimes([{"F": 1.0}]).with_contention(2.0) == StageTimes([{"F": 1.0}])


def test_the_prediction_uses_the_pooled_contention() -> None:
    """A layout measured 40% slower contended pays 40% alone, and 20% once another layout of the
    run at the same action batch measured no slowdown: the pooled ratio."""
    cm = CostModel(_profile())
    alone = [{"F": 1e-3, "B": 2e-3}, {"F": 1e-3, "B": 2e-3, "LOSS": 0.0}]
    slow = [{"F": 1.4e-3, "B": 2.8e-3}, {"F": 1.4e-3, "B": 2.8e-3, "LOSS": 0.0}]
    cfg = ScheduleConfig("pipedream", stages=2, batches=16)
    ka = layout_key(build_schedule(cfg), [2], 32)
    kb = layout_key(build_schedule(ScheduleConfig("local", stages=2, batches=16)), [2], 32)
    assert ka != kb and ka.action_batch == kb.action_batch
    cm.stage_times[ka] = StageTimes(alone, contended=StageTimes(slow))
    own, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    cm.stage_times[kb] = StageTimes(alone, contended=StageTimes(alone))
    pooled, _ = simulate_with_costs(cm, _hw(), cfg, ppv=[2], batch_size=32)
    assert own.iteration_time_s == pytest.approx(1.4 * 3e-3, rel=0.05)  # F + B, always contended
    assert pooled.iteration_time_s == pytest.approx(1.2 * 3e-3, rel=0.05)


def test_a_run_adds_into_its_batch_buffer_in_all_but_one_micro_batch_in_each() -> None:
    from stalesim.validate.stagetime import accumulates

    assert [accumulates(p, 4) for p in range(8)] == [False, True, True, True] * 2
    assert not any(accumulates(p, 1) for p in range(5))  # whole batches: one backward each
    # 5 passes of 3 rounds (validate's default) over 4 micro-batches: 11 of 15 add, as 3 in 4
    assert sum(accumulates(3 * k + m, 4) for k in range(5) for m in range(3)) == 11


def _buffer_seen_by_each_backward(monkeypatch, name: str, rounds: int, pass_index: int = 0,
                                  waits: tuple[float, ...] = ()) -> list[bool]:
    """Per weight-gradient accumulation of stage 0's runtime in ``_sample``: whether its batch
    already had a buffer (the backward adds into it) or not (it stores a fresh one)."""
    import stalesim.runtime.stage as stage_mod
    from stalesim.validate.stagetime import _sample

    seen: list[bool] = []
    real = stage_mod.accumulate

    def spy(buffers, batch, wgrads, borrowed=()):
        seen.append(batch in buffers)
        real(buffers, batch, wgrads, borrowed)

    monkeypatch.setattr(stage_mod, "accumulate", spy)
    _sample(_tc(name, 2, [2]), "cpu", 1, rounds, None, False, waits=waits, pass_index=pass_index)
    return seen[::2]  # stage 1's (each round's first backward; stage 0's alternate with them)


def test_the_stage_timing_adds_into_gradient_buffers_as_a_micro_batched_run_does(monkeypatch) -> None:
    """GPipe with 4 micro-batches: after the two warm-up rounds (both adding), the timed rounds
    of pass 0 add in all but the first of every four; pass 1 continues where pass 0 stopped. A
    whole-batch schedule never adds (each batch has one backward per stage)."""
    from stalesim.validate.stagetime import WARMUP_ROUNDS

    got = _buffer_seen_by_each_backward(monkeypatch, "gpipe", 6)
    assert got == [True] * WARMUP_ROUNDS + [False, True, True, True, False, True]
    got = _buffer_seen_by_each_backward(monkeypatch, "gpipe", 3, pass_index=1)
    assert got[WARMUP_ROUNDS:] == [True, False, True]  # positions 3, 4, 5
    assert not any(_buffer_seen_by_each_backward(monkeypatch, "pipedream", 4))
