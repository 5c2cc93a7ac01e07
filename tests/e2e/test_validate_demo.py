"""The demo's prediction grid: cost sources, the ideal line, warnings and the figure."""

from __future__ import annotations

import pytest

from stalesim.figures.speedup_fig import prediction_figure
from stalesim.sim.model import SimHardware
from stalesim.validate.costmodel import CostModel
from stalesim.validate.demo import ideal_line_statement, predict_grid
from stalesim.workloads.profile import profile_from_dict


def _profile(ms: dict[int, float], n_layers: int = 4):
    """``n_layers`` equal layers; total forward ms per measured batch (backward = 2 x)."""
    def layers(b: int) -> list[dict]:
        return [{"name": f"l{i}", "forward_s": ms[b] / n_layers * 1e-3,
                 "backward_s": 2 * ms[b] / n_layers * 1e-3, "update_s": 1e-5,
                 "param_bytes": 40_000, "output_bytes": 1000 * b, "saved_bytes": 2000 * b,
                 "flops": 1_000_000 * b, "weight_layers": 1} for i in range(n_layers)]
    sizes = list(ms)
    d = {"schema_version": 1, "model": "m", "device": "cpu", "dtype": "float32",
         "batch_size": sizes[0], "layers": layers(sizes[0])}
    if len(sizes) > 1:
        d["by_batch_size"] = [{"batch_size": b, "layers": layers(b)} for b in sizes]
    return profile_from_dict(d)


def _grid(prof, **kw):
    return predict_grid(CostModel(prof), SimHardware.ideal("cpu"), devices=(2,),
                        schedules=("gpipe", "dp"), batch_size=32, gpu_links=("nvlink4",), **kw)


def test_rows_say_where_costs_came_from() -> None:
    rows = _grid(_profile({32: 32.0}))
    by = {(r["hardware"], r["schedule"]): r for r in rows}
    g = by[("this CPU", "gpipe")]  # M = 4: micro-batch 8, below the measured 32
    assert g["cost_source"] == "extrapolated" and g["cost_batches"] == {"8": "extrapolated",
                                                                       "32": "measured"}
    d = by[("this CPU", "dp")]
    assert d["cost_batches"] == {"16": "extrapolated", "32": "measured"}
    assert by[("h100-sxm", "dp")]["cost_source"] == "roofline"
    assert not any(r["above_ideal"] for r in rows) and all(r["warnings"] == [] for r in rows)
    assert ideal_line_statement(rows) == ("ideal line: all 4 predicted speed-ups are at or below "
                                          "the number of devices")


def test_measured_super_linear_point_is_flagged_with_its_cause(tmp_path) -> None:
    # batch 16 measured at 0.5 ms/sample (x3 with backward), batch 32 at 1 ms/sample
    rows = _grid(_profile({16: 8.0, 32: 32.0}))
    d = next(r for r in rows if r["hardware"] == "this CPU" and r["schedule"] == "dp")
    assert d["above_ideal"] and d["speedup"] == pytest.approx(4.0, rel=0.05)
    assert d["cost_source"] == "measured"
    (w,) = d["warnings"]  # one speed-up warning (the demo's baseline), not two
    assert "exceeds the 2 device(s)" in w and "Implied by the measured profile inside its range" in w
    text = ideal_line_statement(rows)
    assert text.startswith("ideal line: 1 prediction(s) above it: dp on 2 x this CPU")
    assert text.endswith("implied by the measured profile inside its range (smaller batches "
                         "measured cheaper per sample), see the warnings")
    png = prediction_figure(rows, tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
