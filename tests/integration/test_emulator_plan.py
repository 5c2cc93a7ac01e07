"""The replay's event and checkpoint plan (stalesim.emulator.plan), on a two-stage PipeDream run."""

from __future__ import annotations

from stalesim.emulator.plan import checkpoint_reservations, plan_events
from stalesim.schedule import ScheduleConfig, build_schedule, dry_run


def _run(batches: int = 4):
    sched = build_schedule(ScheduleConfig("pipedream", stages=2, batches=batches))
    return sched, [st.action for st in dry_run(sched)]


def test_events_fall_where_batches_complete() -> None:
    sched, steps = _run()
    ev = plan_events(steps, units=2, bpe=2, total=4, epochs=True, checkpoints=True, checkpoint_every=0)
    # each position is the update that completes a batch (the last U of batch k-1)
    assert {i: str(steps[i]) for i in ev} == {16: "0U0", 25: "0U1", 38: "0U2", 43: "0U3"}
    assert [ev[i]["done"] for i in sorted(ev)] == [1, 2, 3, 4]
    assert [ev[i]["epoch_end"] for i in sorted(ev)] == [[], [0], [], [1]]
    # checkpoints at every epoch end but the last (checkpoint_every=0)
    assert [ev[i]["checkpoint"] for i in sorted(ev)] == [False, True, False, False]
    none = plan_events(steps, units=2, bpe=2, total=4, epochs=False, checkpoints=False, checkpoint_every=1)
    assert all(not e["checkpoint"] and not e["epoch_end"] for e in none.values())


def test_reservations_are_the_forwards_in_flight_at_each_checkpoint() -> None:
    sched, steps = _run()
    ev = plan_events(steps, units=2, bpe=2, total=4, epochs=True, checkpoints=True, checkpoint_every=1)
    res = checkpoint_reservations(steps, ev, sched)
    # after 0U0: 0F1 (weights v0) waits for its backward; after 0U1: 1F2 (v2) and 0F2 (v1)
    assert dict(res) == {16: [(0, 0, 0)], 25: [(0, 1, 2), (0, 0, 1)], 38: [(0, 0, 2)]}
    no_ck = plan_events(steps, units=2, bpe=2, total=4, epochs=True, checkpoints=False, checkpoint_every=1)
    assert dict(checkpoint_reservations(steps, no_ck, sched)) == {}


def test_replay_plan_reserves_and_releases_through_the_runtimes() -> None:
    from stalesim.emulator.plan import ReplayPlan

    sched, steps = _run()

    class Runtime:
        def __init__(self) -> None:
            self.kept: list[int] = []

        def reserve(self, v: int) -> None:
            self.kept.append(v)

        def release(self, v: int) -> None:
            self.kept.remove(v)

    rts = {(0, s): Runtime() for s in range(2)}
    plan = ReplayPlan(steps, sched, bpe=2, total=4, epochs=True, checkpoints=True, checkpoint_every=1)
    assert plan.events == plan_events(steps, units=2, bpe=2, total=4, epochs=True, checkpoints=True,
                                      checkpoint_every=1)
    assert plan.reserved == checkpoint_reservations(steps, plan.events, sched) and plan.reserved
    plan.reserve(rts)
    assert sum(len(r.kept) for r in rts.values()) == sum(len(v) for v in plan.reserved.values())
    for index in plan.reserved:
        plan.release(index, rts)
    assert all(r.kept == [] for r in rts.values())
    off = ReplayPlan(steps, sched, bpe=2, total=4, epochs=True, checkpoints=False, checkpoint_every=1)
    assert off.reserved == {}
