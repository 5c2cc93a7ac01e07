"""experiments/bench_grad_faults.py: every policy, regime, stage and micro-batch position is
timed and its faults counted; a bad cut is one error line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_bench_grad_faults_times_every_policy_regime_stage_and_position(tmp_path) -> None:
    from experiments.bench_grad_faults import POLICIES, REGIMES, main

    out = tmp_path / "faults.json"
    assert main(["--model", "lenet5", "--ppv", "2", "--micro-batch", "2", "--micro", "3", "--batches", "1",
                 "--repeats", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    keys = {(r["policy"], r["regime"], r["stage"], r["micro"]) for r in res["rows"]}
    assert keys == {(p, g, s, m) for p in POLICIES for g in REGIMES for s in (0, 1) for m in range(3)}
    assert all(r["b_ms"] > 0 and r["f_ms"] > 0 and r["minor_faults"] >= 0 and len(r["b_ms_runs"]) == 1
               for r in res["rows"])


def test_bench_grad_faults_refuses_a_bad_cut_in_one_line(capsys) -> None:
    from experiments.bench_grad_faults import main

    with pytest.raises(SystemExit) as e:
        main(["--ppv", "0"])
    assert e.value.code == 2
    assert "error: argument --ppv" in capsys.readouterr().err
    # a cut the model cannot take: one line naming the field, from the first measuring process
    assert main(["--model", "lenet5", "--ppv", "9", "--batches", "1", "--repeats", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bench_grad_faults: error: ppv[0]: 9 is out of range")
