"""Gantt figure written with the Agg backend."""

from pathlib import Path

import pytest

from stalesim.schedule import ScheduleConfig
from stalesim.sim import simulate
from stalesim.workloads.hardware import hardware_from_catalog
from stalesim.workloads.profile import uniform_profile


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_gantt_written(tmp_path, suffix):
    prof = uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=2_000_000)
    r = simulate(prof, ScheduleConfig("1f1b", stages=4, microbatches=4, batches=2),
                 hardware_from_catalog("cpu-core", "10gbe"))
    path = r.plot(tmp_path / f"g{suffix}")
    assert path.exists() and path.stat().st_size > 1000
    if suffix == ".png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in path.read_bytes()[:2000]


def _capture(monkeypatch, module):
    """Keep the figure a plot function saves (it closes it after saving)."""
    import matplotlib.pyplot as plt

    seen = {}

    def keep(fig, path, **kw):
        seen["texts"] = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
        seen["axes_legends"] = [ax.get_legend() for ax in fig.axes]
        seen["xticks"] = [list(ax.get_xticks()) for ax in fig.axes]
        seen["facecolors"] = {tuple(round(c, 3) for c in fc) for ax in fig.axes
                              for coll in ax.collections for fc in coll.get_facecolors()}
        return Path(path)

    monkeypatch.setattr(module, "savefig_atomic", keep, raising=False)
    monkeypatch.setattr(plt, "close", lambda fig: None)
    return seen


def test_every_action_kind_has_a_colour_and_a_legend_label():
    """A kind added to the IR gets a colour and a legend line, not the fallback grey."""
    from stalesim.schedule.actions import Kind
    from stalesim.sim.plot import COLORS, LEGEND_LABELS

    assert {k.value for k in Kind} <= set(COLORS) and set(LEGEND_LABELS) == set(COLORS)


def test_split_backward_has_its_own_colours_and_legend(tmp_path, monkeypatch):
    """zero-bubble's I and W: own colours (not LOSS's grey), in a legend outside the axes."""
    from matplotlib.colors import to_rgba

    import stalesim.atomic as atomic
    from stalesim.sim.plot import COLORS, FALLBACK_COLOR, LEGEND_LABELS

    assert len({COLORS[k] for k in ("F", "B", "I", "W", "U", "LOSS")}) == 6
    assert FALLBACK_COLOR not in COLORS.values() and set(LEGEND_LABELS) == set(COLORS)
    seen = _capture(monkeypatch, atomic)
    prof = uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=2_000_000)
    r = simulate(prof, ScheduleConfig("zb-h1", stages=4, microbatches=4, batches=1),
                 hardware_from_catalog("cpu-core", "10gbe"))
    r.plot(tmp_path / "g.png")
    assert {"F forward", "I input grad", "W weight grad"} <= set(seen["texts"])
    assert seen["axes_legends"] == [None]  # the legend is the figure's, below the axes
    drawn = seen["facecolors"]
    for k in ("I", "W"):
        assert tuple(round(c, 3) for c in to_rgba(COLORS[k])) in drawn
    assert tuple(round(c, 3) for c in to_rgba(FALLBACK_COLOR)) not in drawn


def test_study_plot_integer_depth_ticks(tmp_path, monkeypatch):
    import stalesim.emulator.study as study

    seen = _capture(monkeypatch, study)
    rows = [{"schedule": "sequential", "mitigation": "none", "depth": 0, "test_acc_mean": 0.98,
             "test_acc_std": 0.01},
            {"schedule": "stale", "mitigation": "none", "depth": 2, "test_acc_mean": 0.96, "test_acc_std": 0.01}]
    study.plot(rows, tmp_path)
    ticks = seen["xticks"][0]
    assert ticks and all(float(t).is_integer() for t in ticks)
