"""The version store of a user's loop: which versions it keeps, and which tables it refuses."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject.versions import VersionStore, check_table, last_reads
from stalesim.schedule import ScheduleConfig, VersionTable, build_schedule


def _table(name: str, **kw: int) -> VersionTable:
    return build_schedule(ScheduleConfig(name, **kw)).table


def test_last_reads_come_from_forward_and_backward_reads():
    t = VersionTable(1, vf={(0, 0, 0, None): 0, (0, 0, 1, None): 0, (0, 0, 2, None): 1},
                     vb={(0, 0, 0, None): 0, (0, 0, 1, None): 1, (0, 0, 2, None): 2},
                     upd={(0, 0, 0): 1, (0, 0, 1): 2, (0, 0, 2): 3})
    assert last_reads(t, 1) == [{0: 1, 1: 2, 2: 2}]


def test_pipedream_keeps_one_copy_per_version_a_later_batch_reads():
    """PipeDream on S stages: stage s's forward of batch t reads version t - (S - 1 - s) (after
    the fill), so the loop holds S - 1 - s old versions of stage s, one copy each."""
    S, N = 3, 10
    table = _table("pipedream", stages=S, batches=N)
    params = [[torch.nn.Parameter(torch.zeros(5))] for _ in range(S)]
    store = VersionStore(table, params)
    held = []
    for t in range(N):
        for s in range(S):
            assert torch.equal(store.weights(s, table.v_f(s, t))[0], torch.full((5,), float(table.v_f(s, t))))
        store.before_update()
        held.append([len(k) for k in store.stash])
        with torch.no_grad():
            for ps in params:
                ps[0].add_(1.0)  # the "update": version n holds n everywhere
        store.after_update()
    assert held[5] == [S - 1 - s for s in range(S)]
    assert store.peak_bytes == sum(S - 1 - s for s in range(S)) * 5 * 4
    with pytest.raises(StalesimError, match="stage 0 has no weight version 3"):
        store.weights(0, 3)


def test_tables_a_loop_cannot_follow_are_refused():
    check_table(_table("2bw", stages=2, microbatches=2, batches=4), 2, 4)
    workers = _table("pipe-sgd", stages=2, workers=2, batches=4)
    check_table(workers, 2, 4, 2)  # every worker's update of batch t is its (t+1)-th
    workers.upd[(1, 0, 1)] = 3
    with pytest.raises(StalesimError, match="schedule: worker 1's stage 0's update of batch 1 is its update 3"):
        check_table(workers, 2, 4, 2)
    bad = _table("stale", stages=2, batches=4)
    bad.upd[(0, 1, 2)] = 2
    with pytest.raises(StalesimError, match="schedule: stage 1's update of batch 2 is its update 2; a training "
                                            "loop applies it as update 3"):
        check_table(bad, 2, 4)
