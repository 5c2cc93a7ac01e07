"""The demo's prediction figure: every schedule distinct, coincident ones visible, the
legend off the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stalesim.figures import speedup_fig
from stalesim.schedule import schedule_names
from stalesim.schedule.style import schedule_style, style_at


def _rows() -> list[dict[str, Any]]:
    """gpipe and dualpipev apart; pipedream and stale on the same speed-ups."""
    speed = {"gpipe": (1.5, 2.5, 4.0), "dualpipev": (1.8, 3.0, 5.0), "pipedream": (1.9, 3.5, 6.0),
             "stale": (1.9, 3.5, 6.0), "1f1b": (1.6, 2.8, 4.5)}
    return [{"hardware": "this CPU", "link": "gloo", "devices": n, "schedule": s, "speedup": v[i],
             "cost_source": "measured" if n < 8 else "extrapolated", "above_ideal": False}
            for s, v in speed.items() for i, n in enumerate((2, 4, 8))]


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The figure as saved (the real file is written too)."""
    import stalesim.atomic as atomic

    seen: dict[str, Any] = {}
    real = atomic.savefig_atomic

    def spy(fig: Any, path: Any, **kw: Any) -> Path:
        fig.canvas.draw()
        seen["fig"], seen["kw"] = fig, kw
        seen["renderer"] = fig.canvas.get_renderer()
        seen["legend_box"] = fig.legends[0].get_window_extent(seen["renderer"])
        seen["axes_boxes"] = [ax.get_window_extent(seen["renderer"]) for ax in fig.axes]
        seen["lines"] = [(ln.get_label(), ln.get_color(), list(ln.get_xdata()))
                         for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        seen["xlabels"] = [ax.get_xlabel() for ax in fig.axes]
        return real(fig, path, **kw)

    monkeypatch.setattr(atomic, "savefig_atomic", spy)
    seen["png"] = speedup_fig.prediction_figure(_rows(), tmp_path / "p.png")
    return seen


def test_every_registered_schedule_has_its_own_style() -> None:
    styles = [schedule_style(n) for n in schedule_names()]
    assert len(set(styles)) == len(styles)
    assert len({st.color for st in styles}) == len(styles)  # colour alone tells them apart
    assert schedule_style("gpipe").color != schedule_style("dualpipev").color
    assert style_at(0) == schedule_style(schedule_names()[0])
    assert schedule_style("my.plugin:sched") == schedule_style("my.plugin:sched")  # stable


def test_schedules_drawn_in_distinct_colours(drawn: dict[str, Any]) -> None:
    colours = {label: colour for label, colour, _ in drawn["lines"]}
    assert set(colours) == {"gpipe", "dualpipev", "pipedream", "stale", "1f1b"}
    assert len(set(colours.values())) == 5
    assert colours["gpipe"] == schedule_style("gpipe").color


def test_coincident_schedules_are_side_by_side_and_named(drawn: dict[str, Any]) -> None:
    xs = {label: x for label, _, x in drawn["lines"]}
    assert xs["pipedream"] != xs["stale"]
    assert [b - a for a, b in zip(xs["pipedream"], xs["stale"], strict=True)] == pytest.approx(
        [speedup_fig.DODGE] * 3)
    assert xs["gpipe"] == [2, 4, 8]  # a schedule that coincides with none stays put
    assert "pipedream = stale" in drawn["xlabels"][0]


def test_legend_is_off_the_data_and_in_the_file(drawn: dict[str, Any]) -> None:
    legend = drawn["legend_box"]
    assert all(not legend.overlaps(box) for box in drawn["axes_boxes"])
    assert drawn["kw"].get("bbox_inches") == "tight"  # the legend outside the axes is kept
    assert drawn["png"].read_bytes()[:4] == b"\x89PNG"


def test_dodged_groups_near_equal_series() -> None:
    offsets, groups = speedup_fig.dodged([("a", [2.0, 4.0], [1.0, 2.0]), ("b", [2.0, 4.0], [1.0, 2.001]),
                                          ("c", [2.0, 4.0], [3.0, 3.0])])
    assert groups == ["a ≈ b"] and offsets == {"a": -speedup_fig.DODGE / 2, "b": speedup_fig.DODGE / 2,
                                              "c": 0.0}
