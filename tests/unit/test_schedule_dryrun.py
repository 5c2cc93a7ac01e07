"""Unit-time dry run: F and B take one step, everything else none; the order respects
every dependency and the same schedule always gives the same order."""

from __future__ import annotations

from stalesim.schedule import Kind, ScheduleConfig, build_schedule, dry_run


def test_sequential_two_stages_step_by_step() -> None:
    sched = build_schedule(ScheduleConfig("sequential", stages=2, batches=1))
    steps = [(st.start, st.end, st.device, str(st.action.with_version(None))) for st in dry_run(sched)]
    computed = [s for s in steps if s[3][1:2] in ("F", "B")]
    assert computed == [(0, 1, 0, "0F0"), (1, 2, 1, "1F0"), (2, 3, 1, "1B0"), (3, 4, 0, "0B0")]
    # zero-time actions sit where they happen: the send at the end of the forward, the update
    # at the end of its backward
    where = {s[3]: (s[0], s[1]) for s in steps}
    assert where["0SEND_F0"] == (1, 1) and where["1U0"] == (3, 3) and where["0U0"] == (4, 4)


def test_stale_register_pipeline_runs_one_forward_per_stage_per_cycle() -> None:
    S, N = 3, 6
    steps = dry_run(build_schedule(ScheduleConfig("stale", stages=S, batches=N)))
    f_start = {(st.action.stage, st.action.batch): st.start for st in steps if st.action.kind is Kind.F}
    for s in range(1, S):  # stage s forwards batch t one step after stage s-1 did
        for t in range(N):
            assert f_start[(s, t)] > f_start[(s - 1, t)]
    # makespan: N cycles plus the fill and drain of 2(S-1) cycles, two unit actions per cycle
    assert max(st.end for st in steps) <= 2 * (N + 2 * (S - 1))


def test_order_is_deterministic_and_topological() -> None:
    from stalesim.schedule.deps import dependencies

    sched = build_schedule(ScheduleConfig("2bw", stages=3, microbatches=2, batches=5))
    a = [str(st.action) for st in dry_run(sched)]
    assert a == [str(st.action) for st in dry_run(sched)]
    pos = {st.action.key: i for i, st in enumerate(dry_run(sched))}
    for st in dry_run(sched):
        for dep in dependencies(sched, st.action):
            if dep[0] != "ARDONE":
                assert pos[dep] < pos[st.action.key]
