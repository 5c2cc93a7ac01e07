"""CPU ranks pinned to their share of the host's cores (stalesim.runtime.affinity)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stalesim.runtime.affinity import PIN_ENV, available_cores, pin_rank, pinning_enabled, rank_cores


@pytest.mark.parametrize(("rank", "world", "cores", "want"), [
    (0, 2, [0, 1], [0]),
    (1, 2, [0, 1], [1]),
    (1, 2, [0, 1, 2, 3], [2, 3]),
    (2, 3, [0, 1, 2, 3, 4, 5, 6], [4, 5]),  # 7 cores, 3 ranks: two each, one unused
    (1, 2, [4, 9], [9]),  # the cores this process may use, not 0..n-1
    (2, 3, [0, 1], None),  # more ranks than cores: no share to give
    (0, 1, [0, 1], None),  # one rank: all of them, nothing to pin
])
def test_each_rank_gets_its_own_contiguous_share(rank: int, world: int, cores: list[int],
                                                 want: list[int] | None) -> None:
    assert rank_cores(rank, world, cores) == want


def test_shares_never_overlap_and_a_bad_rank_is_refused() -> None:
    cores = list(range(16))
    shares = [set(rank_cores(r, 5, cores) or ()) for r in range(5)]
    assert all(len(s) == 3 for s in shares)
    assert len(set().union(*shares)) == 15  # disjoint
    with pytest.raises(ValueError, match="local rank 2 of 2"):
        rank_cores(2, 2, cores)


def test_the_switch_and_gpu_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PIN_ENV, raising=False)
    assert not pinning_enabled() and pin_rank(0, 2, "cpu") is None  # off by default
    monkeypatch.setenv(PIN_ENV, "off")
    assert not pinning_enabled()
    monkeypatch.setenv(PIN_ENV, "on")
    assert pinning_enabled()
    assert pin_rank(0, 2, "cuda") is None  # a GPU rank's host threads are left alone


_CHILD = """
import json, os, sys, threading
from stalesim.runtime.affinity import pin_rank
before = threading.Event(); done = threading.Event(); seen = {}
def early():  # a thread started before pinning: pinned too
    before.wait(); seen["early"] = sorted(os.sched_getaffinity(0)); done.set()
t = threading.Thread(target=early); t.start()
got = pin_rank(int(sys.argv[1]), int(sys.argv[2]), "cpu")
before.set(); done.wait()
late = threading.Thread(target=lambda: seen.__setitem__("late", sorted(os.sched_getaffinity(0))))
late.start(); late.join()
print(json.dumps({"got": got, "main": sorted(os.sched_getaffinity(0)), **seen}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(available_cores()) < 2,
                    reason="needs Linux affinity and two cores")
def test_a_pinned_process_and_all_its_threads_run_on_its_share_only() -> None:
    cores = available_cores()
    env = dict(os.environ, **{PIN_ENV: "on"})
    out = subprocess.run([sys.executable, "-c", _CHILD, "1", "2"], capture_output=True, text=True,
                         env=env, check=True)
    got = json.loads(out.stdout)
    want = rank_cores(1, 2, cores)
    assert got == {"got": want, "main": want, "early": want, "late": want}
    assert sorted(os.sched_getaffinity(0)) == cores  # the test process itself untouched


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(available_cores()) < 2,
                    reason="needs Linux affinity and two cores")
def test_the_executor_pins_its_cpu_ranks_when_asked() -> None:
    """``STALESIM_PIN=on``: each of two CPU ranks runs on its own share, and says so."""
    from stalesim.executor import make_job, run_local
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="1f1b", stages=2, iterations=2,
                      batch_size=8, synthetic_size=64, microbatches=2).check()
    res = run_local(make_job(cfg), "cpu:2", timeout_s=60, env={PIN_ENV: "on"})
    cores = available_cores()
    assert res["cpu_affinity"] == {str(r): rank_cores(r, 2, cores) for r in range(2)}
