"""Virtual stages and split backward in the IR: placements, config errors, version
semantics of I and W, liveness of deferred weight gradients, folding, and the
derived staleness of the synchronous (0) and asynchronous interleaved schedules."""

from dataclasses import replace

import pytest

from stalesim.errors import ScheduleError
from stalesim.schedule import Action, Kind, ScheduleConfig, build_schedule, get_spec, validate
from stalesim.schedule.liveness import stage_liveness
from stalesim.schedule.placement import chunks_of, stage_devices

SYNC_NEW = ("interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "dualpipev")


def build(name, **kw):
    return build_schedule(ScheduleConfig(name, **kw))


def test_placements():
    assert stage_devices("loop", 8, 2) == [0, 1, 2, 3, 0, 1, 2, 3]  # Megatron: s mod R
    assert stage_devices("v", 8, 2) == [0, 1, 2, 3, 3, 2, 1, 0]  # ZB-V / DualPipeV
    assert stage_devices("v", 6, 3) == [0, 1, 1, 0, 0, 1]  # zig-zag beyond two laps
    assert chunks_of("v", 8, 2) == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert stage_devices("contiguous", 3) == [0, 1, 2]


@pytest.mark.parametrize("name", SYNC_NEW)
def test_placement_and_devices_come_from_the_spec(name):
    spec = get_spec(name)
    S = 8
    sched = build(name, stages=S, batches=2, microbatches=8)
    V = spec.stages_per_device
    assert sched.num_devices == S // V and sched.stages_per_device == V
    assert sched.placement == [stage_devices(spec.placement, S, V)]
    assert sched.splits_backward is spec.splits_backward


@pytest.mark.parametrize("name", SYNC_NEW)
def test_synchronous_schedules_have_no_staleness(name):
    sched = build(name, stages=8, batches=6, microbatches=8)
    assert sched.table.staleness() == [0] * 8
    assert sched.table.inconsistent_stages() == []


def test_w_reads_the_version_its_i_read():
    """W is annotated with, and the table's v_B is, the version I read (v_W = v_B)."""
    sched = build("zb-h1", stages=4, batches=3, microbatches=4)
    seen = 0
    for acts in sched.device_actions:
        for a in acts:
            if a.kind in (Kind.I, Kind.W):
                assert a.version == sched.table.v_b(a.stage, a.batch, a.micro) == sched.table.v_f(
                    a.stage, a.batch, a.micro)
                seen += 1
    assert seen == 2 * 4 * 3 * 4


def test_each_backward_is_b_or_i_plus_w():
    sched = build("dualpipev", stages=4, batches=1, microbatches=4)
    kinds: dict[tuple, set] = {}
    for a in sched.actions():
        if a.kind in (Kind.B, Kind.I, Kind.W):
            kinds.setdefault((a.stage, a.micro), set()).add(a.kind)
    assert set(map(frozenset, kinds.values())) == {frozenset({Kind.B}), frozenset({Kind.I, Kind.W})}
    # the checker refuses a backward that is both, and a W without its I
    lists = [list(acts) for acts in sched.device_actions]
    d, i = next((d, i) for d, acts in enumerate(lists) for i, a in enumerate(acts) if a.kind is Kind.W)
    w = lists[d][i]
    lists[d][i] = Action(Kind.B, w.stage, w.batch, w.micro)
    with pytest.raises(ScheduleError, match="B or as I \\+ W, not both"):
        validate(replace(sched, device_actions=lists, versions=None))
    lists = [[a for a in acts if a.kind is not Kind.I] for acts in sched.device_actions]
    with pytest.raises(ScheduleError, match="W without its I"):
        validate(replace(sched, device_actions=lists, split_keys=frozenset(), versions=None))


def test_sends_follow_i_and_w_sends_nothing():
    sched = build("zb-h1", stages=3, batches=1, microbatches=2)
    acts = sched.device_actions[1]
    i = next(k for k, a in enumerate(acts) if a.kind is Kind.I)
    assert acts[i - 1].kind is Kind.RECV_B and acts[i + 1].kind is Kind.SEND_B
    for k, a in enumerate(acts):
        if a.kind is Kind.W:
            assert acts[k - 1].kind not in (Kind.RECV_B,) and acts[k + 1].kind not in (Kind.SEND_B,)


def test_v_turn_and_loop_boundaries_send_only_across_devices():
    v = build("zb-v", stages=4, batches=1, microbatches=2)  # stages 1 and 2 share device 1
    assert not [a for a in v.actions() if a.kind is Kind.SEND_F and a.stage == 1]
    assert [a for a in v.actions() if a.kind is Kind.SEND_F and a.stage == 2]  # 2 -> 3 on device 0
    loop = build("interleaved-1f1b", stages=4, batches=1, microbatches=2)
    assert {a.stage for a in loop.actions() if a.kind is Kind.SEND_F} == {0, 1, 2}


@pytest.mark.parametrize("cfg, match", [
    (dict(schedule="zb-v", stages=5), "stages_per_device: 2 does not divide stages=5"),
    (dict(schedule="interleaved-1f1b", stages=6, stages_per_device=4), "4 does not divide stages=6"),
    (dict(schedule="zb-v", stages=6, stages_per_device=3), "places exactly 2 stages per device"),
    (dict(schedule="gpipe", stages=4, stages_per_device=2), "places one stage per device"),
    (dict(schedule="dualpipev", stages=8, microbatches=4), "dualpipev needs microbatches >= stages = 8"),
    (dict(schedule="interleaved-pipedream", stages=6, microbatches=2),
     "needs a multiple of the devices \\(3\\)"),
    (dict(schedule="interleaved-2bw", stages=8, microbatches=4), "microbatches >= 2 \\(devices - 1\\) = 6"),
    (dict(schedule="interleaved-1f1b", stages=8, fold=5), "fold: 5 devices for 4 device"),
])
def test_bad_combinations_are_one_line_errors(cfg, match):
    with pytest.raises(ScheduleError, match=match) as err:
        build_schedule(ScheduleConfig(**cfg))
    assert "\n" not in str(err.value)


def test_interleaving_any_microbatch_count_drops_padding():
    """M = 5 over 2 devices: rounds of 2, the sixth (padding) micro-batch dropped."""
    sched = build("interleaved-1f1b", stages=4, batches=2, microbatches=5)
    assert sorted({a.micro for a in sched.actions() if a.kind is Kind.F}) == [0, 1, 2, 3, 4]


def test_folding_virtual_devices():
    sched = build("zb-v", stages=8, batches=2, microbatches=4, fold=2)
    assert sched.num_devices == 2
    assert sched.placement == [[0, 0, 1, 1, 1, 1, 0, 0]]
    assert sched.table.staleness() == [0] * 8


def _live(name, **kw):
    sched = build(name, batches=8, **kw)
    return sorted(stage_liveness(sched), key=lambda c: c.stage)


def test_liveness_of_zero_bubble_schedules():
    # ZB-H1: every stage keeps S micro-batches in flight (1F1B's first-stage peak);
    # stage s defers s + 1 weight gradients at most
    h1 = _live("zb-h1", stages=4, microbatches=8)
    assert [c.max_in_flight for c in h1] == [4, 4, 4, 4]
    assert [c.deferred_w for c in h1] == [1, 2, 3, 4]
    # ZB-H2: up to 2S - 1 in flight, the paper's (2p - 1) M_B
    h2 = _live("zb-h2", stages=4, microbatches=8)
    assert [c.max_in_flight for c in h2] == [7, 7, 7, 7]
    # 1F1B for comparison: S - s
    assert [c.max_in_flight for c in _live("1f1b", stages=4, microbatches=8)] == [4, 3, 2, 1]
    for c in h1 + h2:
        assert c.versions_kept == 1 and c.grad_buffers == 1


def test_async_interleaved_staleness_is_derived():
    """No flush: the derived table, not a typed-in number. interleaved-2bw: 1 everywhere
    (W(t+1) = W(t) - lr grad(W(t-1))), two versions at most; interleaved-pipedream (weight
    stashing): deeper stages of the first chunks see more updates in flight."""
    bw = build("interleaved-2bw", stages=8, batches=16, microbatches=8)
    assert bw.table.staleness() == [1] * 8 and bw.table.inconsistent_stages() == []
    assert max(c.versions_kept for c in stage_liveness(bw)) == 2
    pd = build("interleaved-pipedream", stages=8, batches=16, microbatches=4)
    assert pd.table.staleness() == [2, 1, 1, 1, 1, 0, 0, 0]
    assert pd.table.inconsistent_stages() == []  # stashing: every backward reads its forward's
    # one chunk per device, whole batches: Megatron's interleaved warm-up (2 per hop) gives
    # PipeDream's stash depth doubled, 2 (S - 1 - s)
    one = build("interleaved-pipedream", stages=4, batches=16, microbatches=1, stages_per_device=1)
    assert one.table.staleness() == [6, 4, 2, 0]


def test_warmup_of_async_interleaved_runs_interleaved_1f1b():
    sched = build("interleaved-2bw", stages=4, batches=8, microbatches=2, warmup=3)
    assert [p.schedule for p in sched.phases] == ["interleaved-1f1b", "interleaved-2bw"]
    assert max(sched.table.staleness_of((0, s, t, m)) for s in range(4) for t in range(3)
               for m in range(2)) == 0
