"""experiments/bench_duty_cycle.py: alternating blocks of back-to-back and waiting steps,
their ratio per pair, and bad input refused."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


@pytest.mark.parametrize("pause", ["sleep", "spin"])
def test_bench_duty_cycle_times_both_block_kinds_per_pair(tmp_path, pause: str) -> None:
    from experiments.bench_duty_cycle import CONDITIONS, main

    out = tmp_path / "duty.json"
    assert main(["--model", "lenet5", "--batch-size", "2", "--wait-ms", "1", "--pairs", "2", "--steps", "4",
                 "--pause", pause, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["pause"] == pause
    assert len(res["pairs"]) == 2  # the warm-up pair is not kept
    assert all(set(p) == set(CONDITIONS) and all(v["F"] > 0 and v["B"] > 0 for v in p.values())
               for p in res["pairs"])
    r = res["ratios"]["duty"]["F"]
    ratios = sorted(p["duty"]["F"] / p["continuous"]["F"] for p in res["pairs"])
    assert r["min"] == pytest.approx(ratios[0]) and r["max"] == pytest.approx(ratios[-1])


def test_a_negative_wait_is_refused(capsys) -> None:
    from experiments.bench_duty_cycle import main

    with pytest.raises(SystemExit) as e:
        main(["--wait-ms", "-1"])
    assert e.value.code == 2
    assert "--wait-ms" in capsys.readouterr().err


def test_spin_waits_at_least_as_long_as_asked() -> None:
    import time

    from experiments.bench_duty_cycle import _spin

    t0 = time.perf_counter()
    _spin(0.003)
    assert time.perf_counter() - t0 >= 0.003
