"""benchmarks/bench_compute_over_predicted.py: per device, F+B+I+W measured over predicted."""

from __future__ import annotations

import pytest

from benchmarks.bench_compute_over_predicted import ratios

HEAD = ("schedule,device,stage,term,predicted_ms,measured_ms,replayed_ms,measured_minus_predicted_ms,"
        "predicted_count,measured_count,predicted_mean_us,measured_mean_us\n")


def test_sums_the_module_kinds_per_device_and_the_receives_apart(tmp_path) -> None:
    rows = ["gpipe,0,0,F,10,11,,,,,,", "gpipe,0,0,B,20,22,,,,,,", "gpipe,0,0,F,10,11,,,,,,",  # repeated
            "gpipe,0,0,U,1,5,,,,,,", "gpipe,0,0,RECV_B,30,40,,,,,,",
            "gpipe,1,1,I,4,4,,,,,,", "gpipe,1,1,W,6,8,,,,,,", "gpipe,1,1,LOSS,1,9,,,,,,"]
    p = tmp_path / "attribution.csv"
    p.write_text(HEAD + "\n".join(rows) + "\n")
    (s0, d0, r0, recv0, m0), (s1, d1, r1, recv1, m1) = ratios(str(p))
    assert (s0, d0, s1, d1) == ("gpipe", "0", "gpipe", "1")
    assert r0 == pytest.approx(33 / 30) and recv0 == 40 and m0 == 33  # U and RECV left out
    assert r1 == pytest.approx(12 / 10) and recv1 == 0 and m1 == 12  # LOSS left out
