"""plan's pareto.png: every label inside the saved figure, every shape and colour in the legend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stalesim.plan import report
from stalesim.plan.candidates import Candidate
from stalesim.plan.compose import compose
from stalesim.plan.convergence import Convergence, Interval
from stalesim.plan.timing import Timing
from stalesim.schedule.style import schedule_style


def _rows(capacity_mib: int = 4000) -> list[Any]:
    """Five candidates; under 4000 MiB per device 2bw (the right-most) is out of memory,
    with more it is feasible, ranked first and labelled at the right edge."""
    cands = [Candidate("sequential", devices=1, stages=1), Candidate("gpipe", devices=2, stages=2, microbatches=4),
             Candidate("stale", devices=2, stages=2), Candidate("pipedream", devices=2, stages=2),
             Candidate("2bw", devices=2, stages=2, microbatches=4)]
    convs = {c: Convergence([100, 120], 1000, "reached", Interval(110, 100, 120, 2)) for c in cands}
    peaks = (900, 1000, 1300, 1700, 5000)
    its = (1.0, 0.6, 0.4, 0.3, 0.1)
    timings = {c: Timing(0, 0.0, it, 0.0, (p * 2**20, p * 2**20)) for c, it, p in zip(cands, its, peaks, strict=True)}
    return compose(cands, convs, timings, time_error=0.1, capacity_bytes=capacity_mib * 2**20)


HEADER = {"model": "resnet20", "devices": 2, "hardware": "h100-sxm", "target": "loss 0.5", "batch_size": 0,
          "capacity_bytes": 4000 * 2**20}


@pytest.fixture(params=[4000, 16000], ids=["2bw-out-of-memory", "2bw-right-most-label"])
def saved(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    real = report.savefig_atomic

    def spy(fig: Any, path: Any, **kw: Any) -> Path:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        seen["kw"] = kw
        seen["fig_box"] = fig.bbox
        seen["tight_box"] = fig.get_tightbbox(r)
        seen["texts"] = [(t.get_text(), t.get_window_extent(r)) for ax in fig.axes for t in ax.texts]
        seen["legend"] = [t.get_text() for t in fig.legends[0].get_texts()]
        seen["legend_box"] = fig.legends[0].get_window_extent(r)
        seen["axes_box"] = fig.axes[0].get_window_extent(r)
        seen["colors"] = {ln.get_color() for ln in fig.axes[0].get_lines() if ln.get_marker() in ("o", "^")}
        return real(fig, path, **kw)

    monkeypatch.setattr(report, "savefig_atomic", spy)
    seen["capacity"] = request.param
    seen["png"] = report.plot_pareto(_rows(request.param), tmp_path / "pareto.png",
                                     {**HEADER, "capacity_bytes": request.param * 2**20})
    return seen


def test_every_label_lies_inside_the_figure(saved: dict[str, Any]) -> None:
    labels = [(text, box) for text, box in saved["texts"] if text[:2] in {f"{k}." for k in range(1, 6)}]
    assert len(labels) == (4 if saved["capacity"] == 4000 else 5)  # 2bw ranked when it fits
    axes = saved["axes_box"]
    for text, box in labels:  # inside the axes: the right-most one used to run past the figure's edge
        assert axes.x0 <= box.x0 and box.x1 <= axes.x1, text
    assert saved["kw"].get("bbox_inches") == "tight"
    assert saved["png"].read_bytes()[:4] == b"\x89PNG"


def test_legend_explains_shapes_and_colours_and_covers_no_candidate(saved: dict[str, Any]) -> None:
    legend = saved["legend"]
    assert {"synchronous (circle)", "stale weights (triangle)", "Pareto front"} <= set(legend)
    assert {"sequential", "gpipe", "stale", "pipedream"} <= set(legend)
    if saved["capacity"] == 4000:
        assert {"infeasible (out of memory)", "device memory"} <= set(legend) and "2bw" not in legend
    else:  # the capacity line would sit far right of every candidate: not drawn, not listed
        assert "2bw" in legend and "device memory" not in legend and "infeasible (out of memory)" not in legend
    assert not saved["legend_box"].overlaps(saved["axes_box"])
    assert {schedule_style(n).color for n in ("gpipe", "stale", "pipedream")} <= saved["colors"]
