"""experiments/bench_process_speed.py: factors take each round's moment out, the summary
separates a process's own speed from its round-to-round spread, and a real run of a few
processes taking turns."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_factors_divide_each_round_by_its_median_over_the_processes() -> None:
    from experiments.bench_process_speed import factors

    # round 1 is twice as slow for everyone (the machine); process 2 is 10% slower throughout
    times = [[1.0, 2.0, 1.0], [1.0, 2.0, 1.0], [1.1, 2.2, 1.1]]
    fs = factors(times)
    assert fs[0] == pytest.approx([1.0, 1.0, 1.0])
    assert fs[2] == pytest.approx([1.1, 1.1, 1.1])


def test_summary_reports_each_process_s_median_factor_and_the_spread_per_set() -> None:
    from experiments.bench_process_speed import summarize

    a = [[1.0, 1.0, 1.0, 1.0], [0.9, 0.9, 0.9, 0.9], [1.0, 1.2, 1.0, 1.0]]
    res = summarize([a, a])
    assert len(res["processes"]) == 6
    assert res["processes"][1]["median"] == pytest.approx(0.9)
    assert res["set_spread"] == pytest.approx([0.1, 0.1])
    assert res["processes"][0]["step_ms"] == pytest.approx(1000.0)


def test_bench_process_speed_runs_processes_in_turns(tmp_path) -> None:
    from experiments.bench_process_speed import main

    out = tmp_path / "speed.json"
    assert main(["--model", "lenet5", "--batch-size", "2", "--processes", "3", "--rounds", "3",
                 "--per-turn", "2", "--sets", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["times_s"]) == 1 and len(res["times_s"][0]) == 3
    assert all(len(t) == 3 and all(x > 0 for x in t) for t in res["times_s"][0])
    # per round, the median process has factor 1
    fs = [[t[r] / sorted(p[r] for p in res["times_s"][0])[1] for r in range(3)] for t in res["times_s"][0]]
    assert all(sorted(f[r] for f in fs)[1] == pytest.approx(1.0) for r in range(3))


def test_too_few_processes_is_refused(capsys) -> None:
    from experiments.bench_process_speed import main

    with pytest.raises(SystemExit) as e:
        main(["--processes", "1"])
    assert e.value.code == 2
    assert "--processes" in capsys.readouterr().err
