"""experiments/bench_after_recv.py: the trial order both ranks follow, and a real two-rank
run in both modes whose waits are what each condition asks for."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")


def test_trials_warm_up_each_block_with_every_condition_and_kind() -> None:
    from experiments.bench_after_recv import CONDITIONS, TIMED, _trials

    t = _trials(2, 3)
    per_round = len(CONDITIONS) * len(TIMED)
    assert len(t) == 2 * 4 * per_round
    assert [b for b, _, _ in t] == [0] * 4 * per_round + [1] * 4 * per_round
    first = t[:per_round]
    assert {(c, k) for _, c, k in first} == {(c, k) for c in CONDITIONS for k in TIMED}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
@pytest.mark.parametrize(("during", "peer_batch"), [("idle", 2), ("busy", 1)])
def test_bench_after_recv_times_every_condition_after_its_wait(tmp_path, during: str, peer_batch: int) -> None:
    from experiments.bench_after_recv import CONDITIONS, main

    out = tmp_path / "after_recv.json"
    wait_ms = 8.0
    assert main(["--model", "lenet5", "--batch-size", "2", "--wait-ms", str(wait_ms), "--blocks", "2",
                 "--per-block", "1", "--during", during, "--peer-batch", str(peer_batch), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["during"] == during and res["peer_batch"] == peer_batch and len(res["blocks"]) == 2
    assert all(set(b) == set(CONDITIONS) and all(v["F"] > 0 and v["B"] > 0 for v in b.values())
               for b in res["blocks"])
    waits = res["median_wait_s"]
    assert waits["b2b"] < 1e-3  # nothing between the trial's start and its action
    for c in CONDITIONS[1:]:  # rank 0 sends, and a sleep ends, no earlier than the wait
        assert waits[c] >= wait_ms / 1e3, c
        for k in ("F", "B"):
            r = res["ratios"][c][k]
            assert 0 < r["min"] <= r["median"] <= r["max"]
