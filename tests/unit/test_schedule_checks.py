"""Validator and dry run: every schedule validates and is deadlock-free; broken
schedules are rejected with an error that points at the offending step."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalesim.errors import ScheduleError
from stalesim.schedule import (
    Kind,
    ScheduleConfig,
    build_schedule,
    dry_run,
    get_spec,
    schedule_names,
    validate,
)
from stalesim.schedule.deps import peer


@st.composite
def configs(draw):
    """Any schedule with every flag that applies to it: micro-batches, workers, fold,
    switch, synchronous warm-up."""
    name = draw(st.sampled_from(schedule_names()))
    spec = get_spec(name)
    # virtual stages: V chunks per device (fixed for ZB-V/DualPipeV, any for interleaving)
    V = spec.stages_per_device
    if spec.placement != "contiguous" and not spec.fixed_stages_per_device:
        V = draw(st.integers(1, 3))
    R = draw(st.integers(1, 4 if spec.data_parallel else max(1, 16 // V)))
    S = R * V
    M = draw(st.integers(spec.min_microbatches(S), 32)) if spec.uses_micro else 1
    while spec.constraint is not None and spec.constraint(
            ScheduleConfig(name, stages=S, microbatches=M, stages_per_device=V)) is not None:
        M += 1  # the next micro-batch count the order is defined for
    N = draw(st.integers(1, 64))
    P = draw(st.integers(1, 4)) if spec.data_parallel else 1
    # keep each example's action count moderate so CI stays fast
    N = min(N, max(1, 2000 // (S * M)))
    fold = None if spec.data_parallel else draw(st.none() | st.integers(1, R))
    switch = draw(st.none() | st.integers(0, N)) if spec.switches else None
    warmup = draw(st.integers(0, N))
    return ScheduleConfig(name, stages=S, batches=N, microbatches=M, workers=P,
                          fold=fold, switch=switch, warmup=warmup,
                          stages_per_device=None if spec.stages_per_device == V else V)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_every_schedule_validates_and_sends_pair(cfg):
    sched = build_schedule(cfg)
    steps = validate(sched)  # raises on duplicates, missing actions, deadlock
    assert len(steps) == sum(len(a) for a in sched.device_actions)
    keys = {a.key for a in sched.actions()}
    sends = recvs = 0
    for a in sched.actions():
        p = peer(a)
        if p is not None:
            assert p in keys, f"{a} has no partner"
            sends += a.kind in (Kind.SEND_F, Kind.SEND_B)
            recvs += a.kind in (Kind.RECV_F, Kind.RECV_B)
            # a send goes between different devices
            assert sched.device_of(a.stage, a.worker) != sched.device_of(p[2], p[1])
    assert sends == recvs
    # the dry-run order is topological: each action after everything it depends on
    position = {st_.action.key: i for i, st_ in enumerate(steps)}
    from stalesim.schedule.deps import dependencies
    for i, st_ in enumerate(steps):
        for dep in dependencies(sched, st_.action):
            if dep[0] != "ARDONE":
                assert position[dep] < i


def test_single_device_fold_is_plain_training_order():
    sched = build_schedule(ScheduleConfig("sequential", stages=3, batches=2, fold=1))
    assert [str(a) for a in sched.device_actions[0]] == [
        "0F0v0", "1F0v0", "2F0v0", "2LOSS0", "2B0v0", "2U0", "1B0v0", "1U0", "0B0v0", "0U0",
        "0F1v1", "1F1v1", "2F1v1", "2LOSS1", "2B1v1", "2U1", "1B1v1", "1U1", "0B1v1", "0U1",
    ]


def _raw(name="sequential", **kw):
    return build_schedule(ScheduleConfig(name, **kw))


def test_duplicate_action_is_named_with_its_steps():
    sched = _raw(stages=2, batches=2)
    lists = [list(x) for x in sched.device_actions]
    lists[0].append(lists[0][0])
    with pytest.raises(ScheduleError, match=r"0F0v0 appears twice: device 0 step 0 and device 0 step \d+"):
        validate(replace(sched, device_actions=lists))


def test_missing_action_is_named():
    sched = _raw(stages=2, batches=2)
    lists = [[a for a in acts if str(a) != "1U1"] for acts in sched.device_actions]
    with pytest.raises(ScheduleError, match="missing 1 action.*1U1"):
        validate(replace(sched, device_actions=lists))


def test_out_of_order_backward_deadlocks_with_the_step_named():
    sched = _raw(stages=2, batches=1)
    lists = [list(x) for x in sched.device_actions]
    # device 0: put B before F -> B waits on its own later forward
    f = next(i for i, a in enumerate(lists[0]) if a.kind is Kind.F)
    b = next(i for i, a in enumerate(lists[0]) if a.kind is Kind.B)
    lists[0][f], lists[0][b] = lists[0][b], lists[0][f]
    with pytest.raises(ScheduleError, match=r"deadlocks: device 0 step \d+ \(0B0v0\) waits on"):
        validate(replace(sched, device_actions=lists))


def test_cross_device_cycle_deadlocks():
    sched = _raw("gpipe", stages=2, microbatches=2, batches=1)
    lists = [list(x) for x in sched.device_actions]
    # stage 1 wants micro 1 before micro 0 arrives? reorder its receives -> still fine;
    # instead make stage 0 wait for a gradient before sending its activations
    recv_b = [a for a in lists[0] if a.kind is Kind.RECV_B]
    rest = [a for a in lists[0] if a.kind is not Kind.RECV_B]
    lists[0] = recv_b + rest
    with pytest.raises(ScheduleError, match="deadlocks"):
        dry_run(replace(sched, device_actions=lists))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(stages=0), "stages: expected an integer >= 1, got 0"),
        (dict(microbatches=0), "microbatches: expected an integer >= 1, got 0"),
        (dict(batches=-1), "batches"),
        (dict(stages=2, fold=3), "fold: 3 devices for 2 stage"),
        (dict(stages=2, switch=99, batches=4), "switch: must be in"),
        (dict(stages=2, microbatches=2), "microbatches: schedule 'hybrid' does not split batches"),
        (dict(workers=2), "workers: schedule 'hybrid' is not data-parallel"),
        (dict(stages=10**6, batches=8), "actions, more than this tool builds"),
        (dict(stages=2, batches=10**7), "batches:"),
    ],
)
def test_impossible_parameters(kwargs, match):
    with pytest.raises(ScheduleError, match=match):
        build_schedule(ScheduleConfig("hybrid", **kwargs))


def test_2bw_needs_enough_microbatches():
    with pytest.raises(ScheduleError, match="2bw needs microbatches >= stages - 1"):
        build_schedule(ScheduleConfig("2bw", stages=5, microbatches=2))


def test_unknown_schedule_lists_known_ones():
    with pytest.raises(ScheduleError, match="schedule: unknown 'nope'.*stale"):
        build_schedule(ScheduleConfig("nope"))


@pytest.mark.parametrize("kwargs, match", [
    (dict(schedule="dp", workers=2, stages=2, fold=1), "fold: 'dp' places each worker"),
    (dict(schedule="stale", stages=2, switch=1), "switch: only a switching schedule"),
])
def test_flags_that_do_not_apply_are_refused(kwargs, match):
    with pytest.raises(ScheduleError, match=match):
        build_schedule(ScheduleConfig(**kwargs))
