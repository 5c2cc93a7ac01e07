"""Liveness pass: versions, gradient buffers, activations and buckets alive per stage,
derived from each device's action order (expected values worked out per schedule)."""

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.schedule.liveness import backward_reads, in_flight_per_stage, stage_liveness

S = 4


def counts(name, **kw):
    sched = build_schedule(ScheduleConfig(name, stages=S, batches=16, **kw))
    return {c.stage: c for c in stage_liveness(sched) if c.worker == 0}


@pytest.mark.parametrize("M", [2, 4, 8])
def test_gpipe_stashes_all_microbatches(M):
    for c in counts("gpipe", microbatches=M).values():
        assert c.max_in_flight == M and c.versions_kept == 1 and c.grad_buffers == 1


@pytest.mark.parametrize("M", [1, 2, 3, 8])
def test_1f1b_stashes_min_of_depth_and_m(M):
    for s, c in counts("1f1b", microbatches=M).items():
        assert c.max_in_flight == min(S - s, M)
        assert c.versions_kept == 1


def test_pipedream_keeps_s_minus_s_versions():
    for s, c in counts("pipedream").items():
        assert c.versions_kept == S - s
        assert c.max_in_flight == S - s
        assert c.grad_buffers == 1


def test_2bw_keeps_two_versions_and_two_gradient_buffers():
    for s, c in counts("2bw", microbatches=4).items():
        # the last stage's backward follows its forward at once: one version suffices there
        assert c.versions_kept == (2 if s < S - 1 else 1)
        assert c.grad_buffers == 2


def test_stale_one_version_and_register_activations():
    for s, c in counts("stale").items():
        assert c.versions_kept == 1
        assert c.max_in_flight == 2 * (S - 1 - s) + 1


def test_data_parallel_gradient_buckets():
    dp = counts("dp", workers=2)
    ps = counts("pipe-sgd", workers=2)
    for s in range(S):
        assert dp[s].allreduce_in_flight == 1 and dp[s].grad_buffers == 1
        assert ps[s].allreduce_in_flight == 2 and ps[s].grad_buffers == 2


def test_in_flight_per_stage_is_the_fast_paths_round_trip_count():
    stale = build_schedule(ScheduleConfig("stale", stages=S, batches=16))
    pd = build_schedule(ScheduleConfig("pipedream", stages=S, batches=16))
    assert in_flight_per_stage(stale) == [2 * (S - 1 - s) + 1 for s in range(S)]
    assert in_flight_per_stage(pd) == [S - s for s in range(S)]


def test_warmup_phase_keeps_one_batch_in_flight_then_the_pipeline_fills():
    sched = build_schedule(ScheduleConfig("stale", stages=3, batches=12, warmup=4))
    c0 = next(c for c in stage_liveness(sched, keep_series=True) if c.stage == 0)
    # the series is in device order: the sequential warm-up never has 2 batches in flight
    first_stale_f = next(i for i, a in enumerate(sched.device_actions[0]) if a.batch == 4)
    assert max(x[2] for x in c0.series if x[0] < first_stale_f) == 1
    assert c0.max_in_flight == 2 * 2 + 1


def test_backward_reads_counts_each_version_its_backwards_need():
    sched = build_schedule(ScheduleConfig("pipedream", stages=3, batches=6))
    # stage 0 runs F0 F1 (warm-up), F2 B0 U0, F3 B1 U1, ...: F0-F2 read version 0, then one
    # forward per update; stashing makes each backward read its forward's version
    assert backward_reads(sched.versions, stage=0) == {0: 3, 1: 1, 2: 1, 3: 1}
    assert backward_reads(sched.versions, stage=2) == {t: 1 for t in range(6)}


def test_shared_whole_counts_only_records_before_their_backward():
    """On a V device (stages s and s+1 together) a (micro-)batch's boundary tensor is one
    storage; shared_whole keeps only the pairs neither of whose backwards started, a subset
    of shared that is smaller once some I has run."""
    from collections import Counter

    from stalesim.schedule.liveness import memory_series

    sched = build_schedule(ScheduleConfig("zb-v", stages=4, batches=1, microbatches=4))
    smaller = some_whole = 0
    for series in memory_series(sched):
        for smp in series:
            whole, alive = Counter(smp.shared_whole), Counter(smp.shared)
            assert not whole - alive
            smaller += sum(alive.values()) > sum(whole.values())
            some_whole += bool(whole)
    assert smaller >= 1 and some_whole >= 1
