"""experiments/bench_wake.py: the three conditions are timed and compared, the process left
where it was."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores")
def test_bench_wake_times_every_condition_and_restores_the_affinity(tmp_path) -> None:
    from experiments.bench_wake import CONDITIONS, main

    before = os.sched_getaffinity(0)
    out = tmp_path / "wake.json"
    assert main(["--model", "lenet5", "--batch-size", "2", "--wait-ms", "1", "--blocks", "2",
                 "--per-block", "2", "--out", str(out)]) == 0
    assert os.sched_getaffinity(0) == before
    res = json.loads(out.read_text())
    assert len(res["blocks"]) == 2
    assert all(set(b) == set(CONDITIONS) and all(v["F"] > 0 and v["B"] > 0 for v in b.values())
               for b in res["blocks"])
    for c in CONDITIONS[1:]:
        for k in ("F", "B"):
            r = res["ratios"][c][k]
            assert 0 < r["min"] <= r["median"] <= r["max"]
