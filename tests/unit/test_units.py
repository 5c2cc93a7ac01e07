"""stalesim.units: readable durations (no exponent) and binary bytes (MiB) for terminal output."""

from __future__ import annotations

import pytest

from stalesim.units import fmt_bytes, fmt_seconds


@pytest.mark.parametrize("s, text", [(61.99, "61.99 s"), (1.524e-3, "1.524 ms"), (2.114e-5, "21.14 us"),
                                     (0.0, "0 s"), (11190.0, "3.108 h"), (900.0, "15 min"),
                                     (None, "n/a"), (float("nan"), "n/a")])
def test_fmt_seconds(s, text):
    assert fmt_seconds(s) == text


def test_fmt_seconds_never_an_exponent():
    for k in range(-7, 6):
        assert "e" not in fmt_seconds(1.2345 * 10**k).replace("min", "")


@pytest.mark.parametrize("b, text", [(149_446_200, "143 MiB"), (1536, "1.5 KiB"), (512, "512 B"),
                                     (3 * 2**30, "3 GiB"), (None, "n/a")])
def test_fmt_bytes(b, text):
    assert fmt_bytes(b) == text


def test_simulate_summary_readable():
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import simulate
    from stalesim.workloads.hardware import hardware_from_catalog
    from stalesim.workloads.profile import uniform_profile

    prof = uniform_profile(8, 5.0, 10.0, 128, output_bytes=2_000_000)  # seconds-long layers
    r = simulate(prof, ScheduleConfig("gpipe", stages=2, microbatches=2, batches=2),
                 hardware_from_catalog("cpu-core", "10gbe"))
    text = r.summary()
    assert "e+" not in text and " MB" not in text and "MiB" in text
    line = next(x for x in text.splitlines() if x.startswith("iteration time"))
    assert " s per mini-batch" in line


def test_fmt_bandwidth():
    from stalesim.units import fmt_bandwidth

    assert fmt_bandwidth(1.25e9) == "1.25 GB/s" and fmt_bandwidth(4.5e11) == "450 GB/s"
    assert fmt_bandwidth(float("inf")) == "unlimited" and fmt_bandwidth(2e6) == "2 MB/s"
