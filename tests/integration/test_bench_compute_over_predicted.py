"""experiments/bench_compute_over_predicted.py: per device, F+B+I+W measured over predicted."""

from __future__ import annotations

import pytest

from experiments.bench_compute_over_predicted import ratios

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


def _trace(path, events) -> None:
    import json

    path.mkdir(parents=True)
    ev = [{"name": n, "ph": "X", "ts": 0.0, "dur": ms * 1e3, "pid": pid, "tid": "compute", "cat": cat}
          for n, cat, pid, ms in events]
    (path / "trace.json").write_text(json.dumps({"traceEvents": [{"name": "process_name", "ph": "M"}, *ev]}))


def test_round_ratios_read_each_repeat_s_trace_over_the_middle_half_of_its_batches(tmp_path) -> None:
    from experiments.bench_compute_over_predicted import round_ratios, trace_compute

    p = tmp_path / "attribution.csv"
    p.write_text(HEAD + "\n".join(["gpipe,0,0,F,10,11,,,,,,", "gpipe,0,0,B,20,22,,,,,,",
                                   "gpipe,1,1,F,5,5,,,,,,", "gpipe,1,1,B,5,5,,,,,,"]) + "\n")

    def events(scale: float) -> list:
        out = []
        for t in range(8):  # batches 2..5 are the middle half; 0, 1, 6, 7 cost 100x
            w = scale * (1 if 2 <= t < 6 else 100)
            out += [(f"0F{t}.0", "F", 0, 10 * w), (f"0B{t}.0", "B", 0, 20 * w), (f"0U{t}", "U", 0, 50),
                    (f"1F{t}.0", "F", 1, 6 * w), (f"1RECV_F{t}.0", "RECV_F", 1, 99), (f"1B{t}.0", "B", 1, 6 * w)]
        return out

    _trace(tmp_path / "runs" / "gpipe", events(1.0))
    _trace(tmp_path / "runs" / "gpipe.r1", events(1.5))
    assert trace_compute(tmp_path / "runs" / "gpipe" / "trace.json") == pytest.approx({0: 30.0, 1: 12.0})
    rows = round_ratios(str(p))["gpipe"]
    assert len(rows) == 2
    assert rows[0] == pytest.approx({0: 1.0, 1: 1.2}) and rows[1] == pytest.approx({0: 1.5, 1: 1.8})
