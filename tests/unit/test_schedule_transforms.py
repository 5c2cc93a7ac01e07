"""IR transforms: phases (synchronous warm-up, hybrid switch) and folding."""

from __future__ import annotations

import pytest

from stalesim.schedule import Kind, ScheduleConfig, build_schedule, get_spec, schedule_names


@pytest.mark.parametrize("name", schedule_names())
def test_warmup_is_synchronous_then_the_schedule_proper(name: str) -> None:
    spec = get_spec(name)
    K, N = 3, 20
    shape = dict(stages=3 * spec.stages_per_device, batches=N, microbatches=3, workers=2)
    warm = build_schedule(spec.config(**shape, warmup=K))
    plain = build_schedule(spec.config(**shape))
    v = warm.versions
    for key in v.vf:
        if key[2] < K:
            assert v.staleness_of(key) == 0
    if spec.staleness_free:
        assert warm.fingerprint() == plain.fingerprint()
    else:
        assert warm.phases[0].schedule == spec.warmup_with and warm.phases[0].last == K
        assert max(v.staleness()) == max(plain.versions.staleness())
        # the schedule proper starts from the weights after K synchronous updates
        assert v.v_f(0, K, 0 if spec.uses_micro else None) == K
        # each device finishes every warm-up batch before starting the schedule proper
        for acts in warm.device_actions:
            batches = [a.batch for a in acts if a.kind in (Kind.F, Kind.B)]
            last_warm = max(i for i, t in enumerate(batches) if t < K)
            assert all(t < K for t in batches[: last_warm + 1])


def test_hybrid_switch_with_warmup() -> None:
    s = build_schedule(ScheduleConfig("hybrid", stages=3, batches=14, warmup=2, switch=9))
    assert [(p.schedule, p.first, p.last) for p in s.phases] == [("sequential", 0, 2), ("hybrid", 2, 9),
                                                                ("sequential", 9, 14)]
    assert s.params == {"warmup": 2, "switch": 9}
    v = s.versions
    assert v.delay_f(0, 6) == 4 and v.delay_f(0, 10) == 0  # stale inside, synchronous after
    assert s.steady_window() is None


@pytest.mark.parametrize("name", [n for n in schedule_names() if not get_spec(n).data_parallel])
def test_fold_keeps_each_stages_order_hence_its_versions(name: str) -> None:
    spec = get_spec(name)
    V = spec.stages_per_device  # V chunks per device: 4 devices' worth of stages folded onto 2
    S = 4 * V
    shape = dict(stages=S, batches=10, microbatches=max(3, spec.min_microbatches(S)))
    plain = build_schedule(spec.config(**shape))
    folded = build_schedule(spec.config(**shape, fold=2))
    assert plain.num_devices == 4 and folded.num_devices == 2
    # neighbouring devices share one: device d of the unfolded schedule runs on d // 2
    assert folded.placement == [[d // 2 for d in plain.placement[0]]]
    assert folded.versions.vf == plain.versions.vf and folded.versions.vb == plain.versions.vb

    def per_stage(sched):
        return {s: [a.key for a in sched.actions() if a.stage == s and a.kind in (Kind.F, Kind.B, Kind.U)]
                for s in range(S)}

    assert per_stage(folded) == per_stage(plain)
