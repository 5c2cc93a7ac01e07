"""The derived version table: which weight version each F/B read, which update
each gradient fed. Expected values come from the DESIGN.md table and from
working each schedule out by hand; the derivation never sees them."""

import pytest

from stalesim.schedule import Kind, ScheduleConfig, build_schedule, get_spec, schedule_names

EXPECTED = {
    "sequential": lambda S, s: 0,
    "gpipe": lambda S, s: 0,
    "1f1b": lambda S, s: 0,
    "pipedream": lambda S, s: S - 1 - s,
    "2bw": lambda S, s: 1,
    "stale": lambda S, s: 2 * (S - 1 - s),
    "local": lambda S, s: 0,
    "dp": lambda S, s: 0,
    "pipe-sgd": lambda S, s: 1,
}


@pytest.mark.parametrize("S", range(1, 9))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_staleness_matches_design_table(name, S):
    sched = build_schedule(get_spec(name).config(stages=S, batches=4 * S + 4, microbatches=S, workers=2))
    assert sched.versions.staleness() == [EXPECTED[name](S, s) for s in range(S)]


def test_issue_examples():
    assert build_schedule(ScheduleConfig("stale", stages=4, batches=16)).versions.staleness() == [6, 4, 2, 0]
    assert build_schedule(ScheduleConfig("pipedream", stages=4, batches=16)).versions.staleness() == [3, 2, 1, 0]


def test_stale_forward_is_stale_backward_is_current():
    S, N = 4, 12
    v = build_schedule(ScheduleConfig("stale", stages=S, batches=N)).versions
    for s in range(S):
        for t in range(N):
            delay = 2 * (S - 1 - s)
            assert v.v_f(s, t) == max(0, t - delay)  # updates of batches < t - delay applied
            assert v.v_b(s, t) == t  # backward reads the weights after all earlier updates
            assert v.u(s, t) == t + 1
    assert v.inconsistent_stages() == [0, 1, 2]


def test_pipedream_stashes_the_forward_version():
    S, N = 4, 12
    v = build_schedule(ScheduleConfig("pipedream", stages=S, batches=N)).versions
    for s in range(S):
        for t in range(N):
            assert v.v_b(s, t) == v.v_f(s, t) == max(0, t - (S - 1 - s))
    assert v.inconsistent_stages() == []


def test_2bw_update_rule_w_next_is_w_minus_grad_of_w_prev():
    S, M, N = 4, 4, 10
    v = build_schedule(ScheduleConfig("2bw", stages=S, microbatches=M, batches=N)).versions
    for s in range(S):
        for t in range(N):
            for m in range(M):
                # gradient of batch t computed at W(t-1) feeds the update producing W(t+1)
                assert v.v_f(s, t, m) == v.v_b(s, t, m) == max(0, t - 1)
            assert v.u(s, t) == t + 1


def test_2bw_keeps_at_most_two_versions_alive():
    sched = build_schedule(ScheduleConfig("2bw", stages=4, microbatches=3, batches=8))
    v = sched.versions
    for d, acts in enumerate(sched.device_actions):
        current, live = 0, {}
        for a in acts:
            if a.kind is Kind.F:
                live[(a.batch, a.micro)] = a.version
            elif a.kind is Kind.B:
                live.pop((a.batch, a.micro))
            elif a.kind is Kind.U:
                current += 1
            assert len(set(live.values()) | {current}) <= 2, (d, a)
    assert v.staleness() == [1, 1, 1, 1]


def test_pipe_sgd_width_two_and_warmup():
    v = build_schedule(ScheduleConfig("pipe-sgd", stages=1, workers=3, batches=10, warmup=3)).versions
    for r in range(3):
        for t in range(10):
            expected = t if t <= 3 else t - 1  # synchronous through the warm-up
            assert v.v_f(0, t, worker=r) == expected
            assert v.u(0, t, worker=r) == t + 1


def test_hybrid_switches_to_zero_staleness_after_the_drain():
    S, N, K = 3, 16, 8
    sched = build_schedule(ScheduleConfig("hybrid", stages=S, batches=N, switch=K))
    v = sched.versions
    assert sched.params["switch"] == K
    for t in range(K, N):
        for s in range(S):
            assert v.v_f(s, t) == v.v_b(s, t) == t and v.u(s, t) == t + 1
    assert v.staleness() == [4, 2, 0]


def test_microbatches_of_a_flush_schedule_read_one_version():
    for name in ("gpipe", "1f1b"):
        v = build_schedule(ScheduleConfig(name, stages=3, microbatches=5, batches=4)).versions
        rows = v.rows()
        assert all("micro" not in r for r in rows)
        assert {(r["stage"], r["batch"]): r["v_f"] for r in rows} == {
            (s, t): t for s in range(3) for t in range(4)
        }


def test_rows_have_the_documented_fields():
    rows = build_schedule(ScheduleConfig("stale", stages=2, batches=3)).versions.rows()
    assert rows[0] == {"stage": 0, "batch": 0, "v_f": 0, "v_b": 0, "u": 1}
    assert len(rows) == 6


@pytest.mark.parametrize("name", schedule_names())
def test_actions_carry_their_versions(name):
    sched = build_schedule(get_spec(name).config(stages=4, microbatches=4, batches=6, workers=2))
    v = sched.versions
    for acts in sched.device_actions:
        for a in acts:
            if a.kind is Kind.F:
                assert a.version == v.v_f(a.stage, a.batch, a.micro, a.worker)
            elif a.kind in (Kind.B, Kind.I, Kind.W):  # W reads the version its I read
                assert a.version == v.v_b(a.stage, a.batch, a.micro, a.worker)
            else:
                assert a.version is None


def test_delays_are_answered_by_the_table():
    """D_F = u - 1 - v_F and D_B = u - 1 - v_B per action: what the mitigations use."""
    v = build_schedule(ScheduleConfig("stale", stages=3, batches=10)).versions
    for t in range(4, 10):  # steady state
        assert v.delay_f(0, t) == 4 and v.delay_b(0, t) == 0 and v.gap(0, t) == 4
        assert v.delay_f(2, t) == v.delay_b(2, t) == 0
    w = build_schedule(ScheduleConfig("2bw", stages=3, microbatches=2, batches=6)).versions
    assert w.batch_delay(0, 4, [0, 1]) == 1 and w.delay_b(0, 4, 1) == 1  # stashed: D_B = D_F


def test_table_from_a_log_of_used_versions_equals_the_derived_one():
    from stalesim.schedule import Action, VersionTable

    sched = build_schedule(ScheduleConfig("pipedream", stages=3, batches=8))
    log = []
    for acts in sched.device_actions:
        for a in acts:
            if a.kind in (Kind.F, Kind.B):
                log.append((a.with_version(None), a.version))
            elif a.kind is Kind.U:
                log.append((a, sched.versions.u(a.stage, a.batch)))
    got = VersionTable.from_log(3, log)
    assert got.staleness() == sched.versions.staleness() == [2, 1, 0]
    # a log cut before the last updates keeps only complete rows
    cut = [(a, ver) for a, ver in log if not (a.kind is Kind.U and a.batch == 7)]
    part = VersionTable.from_log(3, cut).complete_rows()
    assert all(k[2] < 7 for k in part.vf) and part.staleness() == [2, 1, 0]
    assert isinstance(Action.parse(str(log[0][0])), Action)
