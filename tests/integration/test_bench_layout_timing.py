"""experiments/bench_layout_timing.py: each schedule's layout timed once per pass, a forward
per stage, and the medians over passes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_bench_layout_timing_times_every_layout_every_pass(tmp_path) -> None:
    from experiments.bench_layout_timing import main

    out = tmp_path / "layouts.json"
    assert main(["--model", "lenet5", "--batch-size", "8", "--microbatches", "2", "--ppv", "2",
                 "--schedules", "gpipe,zb-h1", "--passes", "2", "--rounds", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    for s in ("gpipe", "zb-h1"):
        assert len(res["forward_ms"][s]) == 2  # one entry per pass
        assert all(len(f) == 2 and all(x > 0 for x in f) for f in res["forward_ms"][s])  # two stages
        for i in range(2):
            lo, hi = sorted(f[i] for f in res["forward_ms"][s])
            assert lo <= res["median_forward_ms"][s][i] <= hi


def test_a_bad_cut_is_refused(capsys) -> None:
    from experiments.bench_layout_timing import main

    with pytest.raises(SystemExit) as e:
        main(["--ppv", "a,b"])
    assert e.value.code == 2
    assert "--ppv" in capsys.readouterr().err


def test_an_unknown_schedule_is_refused(capsys) -> None:
    from experiments.bench_layout_timing import main

    with pytest.raises(SystemExit) as e:
        main(["--schedules", "gpipe,nosuch"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--schedules" in err and "nosuch" in err
