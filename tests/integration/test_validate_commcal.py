"""The per-message calibration (stalesim.validate.commcal) between two real gloo ranks: every
quantity is measured at every size and fitted; the compute a moving message takes from a
rank is measured on both sides."""

from __future__ import annotations

import math

import pytest

from stalesim.validate.commcal import QUANTITIES, cost, measure_comm


@pytest.mark.slow
def test_two_cpu_ranks_measure_every_quantity_at_every_size() -> None:
    sizes = [64, 1 << 18]
    out = measure_comm(sizes, repeats=4, devices="cpu:2", timeout_s=60.0)
    assert out["sizes"] == sizes and out["repeats"] == 4 and out["rank_devices"] == ["cpu", "cpu"]
    for q in QUANTITIES:
        fit = out[q]
        assert fit["alpha_s"] >= 0.0 and fit["beta_s_per_byte"] >= 0.0
        assert set(fit["median_s"]) == {str(n) for n in sizes}
        assert all(math.isfinite(v) for v in fit["median_s"].values())
    # a quantity nobody sampled would read exactly 0.0 (the medians' default); a paired
    # difference of two timings never does
    for q in ("lost_sender", "lost_receiver"):
        assert all(v != 0.0 for v in out[q]["median_s"].values()), q
        # a message cannot cost the compute more than the 3 ms of work it moved during
        assert abs(out[q]["median_s"]["64"]) < 3e-3
    # posting and completing are real work (a message's arrival is not asserted on: a wake-up
    # on this shared machine takes 0.2-2 ms whatever the size)
    assert out["post"]["median_s"]["64"] > 0.0 and out["complete"]["median_s"]["64"] > 0.0
    assert cost(out["post"], 1 << 18) >= out["post"]["alpha_s"]
