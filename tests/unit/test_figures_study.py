"""The study plots: a title, an x-label in words, and a diverged seed marked with a legend entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stalesim.emulator.study as study
from stalesim.figures.study_figs import seed_legend
from stalesim.schedule.style import DEPTH_AXIS_LABEL, schedule_style


def _row(schedule: str, depth: int, acc: float | None, diverged: int = 0, mitigation: str = "none") -> dict[str, Any]:
    return {"schedule": schedule, "mitigation": mitigation, "depth": depth, "test_acc_mean": acc,
            "test_acc_std": None if acc is None else 0.01, "seeds": 3, "diverged": diverged}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    real = study.savefig_atomic

    def spy(fig: Any, path: Any, **kw: Any) -> Path:
        ax = fig.axes[0]
        seen["title"], seen["xlabel"] = ax.get_title(), ax.get_xlabel()
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        seen["crosses"] = [(list(ln.get_xdata()), ln.get_color()) for ln in ax.get_lines() if ln.get_marker() == "x"]
        seen["notes"] = [t.get_text() for t in ax.texts]
        seen["colors"] = {ln.get_color() for ln in ax.get_lines() if ln.get_marker() not in ("x", "None", "_")}
        return real(fig, path, **kw)

    monkeypatch.setattr(study, "savefig_atomic", spy)
    rows = [_row("sequential", 0, 0.98), _row("stale", 1, 0.97, diverged=1), _row("stale", 3, None, diverged=3),
            _row("stale", 2, 0.95)]
    seen["png"] = study.plot(rows, tmp_path)
    return seen


def test_title_and_words_on_the_x_axis(drawn: dict[str, Any]) -> None:
    assert "staleness depth" in drawn["title"]
    assert drawn["xlabel"] == DEPTH_AXIS_LABEL and "v_F" not in drawn["xlabel"] and "u - 1" not in drawn["xlabel"]
    assert drawn["png"].name == "accuracy_vs_staleness.png" and drawn["png"].stat().st_size > 0


def test_diverged_seeds_get_a_cross_a_count_and_one_legend_entry(drawn: dict[str, Any]) -> None:
    # depth 1 (one of three seeds) and depth 3 (all three: no mean, the cross sits at the bottom)
    assert sorted(x[0] for x, _ in drawn["crosses"]) == [1, 3]
    assert all(c == "red" for _, c in drawn["crosses"])
    assert sorted(drawn["notes"]) == ["1/3", "3/3"]
    assert drawn["legend"].count(study.DIVERGED_LABEL) == 1
    assert {"sequential", "stale"} <= set(drawn["legend"])
    assert {schedule_style("sequential").color, schedule_style("stale").color} <= drawn["colors"]


def test_no_divergence_no_cross(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(study, "savefig_atomic",
                        lambda fig, path, **kw: seen.extend(ln.get_marker() for ln in fig.axes[0].get_lines()) or path)
    study.plot([_row("sequential", 0, 0.98), _row("stale", 2, 0.95)], tmp_path)
    assert seen and "x" not in seen


def test_stored_study_figure_legend_names_the_diverged_seed() -> None:
    labels = [h.get_label() for h in seed_legend()]
    assert "diverged seed (NaN loss)" in labels and "mean ± std" in labels
