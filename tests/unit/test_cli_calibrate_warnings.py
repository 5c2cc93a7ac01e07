"""`stalesim calibrate` warns when its fit or the all-reduce model misses the measurement."""

from __future__ import annotations

from stalesim.cli.calibrate_cmd import FIT_ERROR_BOUND, fit_warnings


def _data(fit_err: float, ar_s: float, model_s: float) -> dict:
    return {"link": {"fit_max_rel_error": fit_err},
            "allreduce": {"measured": [{"bytes": 4 * 2**20, "workers": 2, "seconds": ar_s,
                                        "ring_model_s": model_s}]}}


def test_quiet_when_within_the_bound():
    assert FIT_ERROR_BOUND == 0.25
    assert fit_warnings(_data(0.10, 1.1e-3, 1.0e-3)) == []


def test_fit_error_and_allreduce_off_are_warned():
    got = fit_warnings(_data(0.99, 3.6e-3, 1.0e-3))  # what a busy 2-core box measured
    assert len(got) == 2
    assert "off by up to 99%" in got[0] and "bound 25%" in got[0]
    assert "all-reduce of 4 MiB over 2 took 3.6x its ring model" in got[1]
    assert len(fit_warnings(_data(0.0, 1.0e-3, 3.6e-3))) == 1  # faster than modelled counts too
