"""Memory model per schedule, derived from the IR's action order."""

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim.memory import memory_report, stage_memory_counts
from stalesim.sim.model import uniform_costs

S = 4


def counts(name, **kw):
    sched = build_schedule(name, ScheduleConfig(stages=S, batches=16, **kw))
    return {c.stage: c for c in stage_memory_counts(sched) if c.worker == 0}


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


def test_bytes_per_component():
    sched = build_schedule("pipedream", ScheduleConfig(stages=S, batches=12))
    c = uniform_costs(S, 1, 1, param_bytes=100, saved_bytes=10, msg_bytes=7)
    rep = memory_report(sched, c, optimizer_state_factor=2.0)
    b0 = rep.breakdown[0]
    assert b0 == {"weights": 400, "gradients": 100, "optimizer": 200, "activations": 40,
                  "comm_buffers": 14}
    assert rep.peak_bytes[0] == sum(b0.values())
    mid = rep.breakdown[1]
    assert mid["comm_buffers"] == 4 * 7  # activation in/out, gradient in/out


def test_folded_device_sums_its_stages():
    sched = build_schedule("gpipe", ScheduleConfig(stages=4, batches=4, microbatches=2, devices=2))
    c = uniform_costs(4, 1, 1, param_bytes=100)
    rep = memory_report(sched, c)
    assert len(rep.peak_bytes) == 2
    assert rep.breakdown[0]["weights"] == 200
