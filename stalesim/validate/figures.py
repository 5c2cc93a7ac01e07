"""Figures of a validation (matplotlib, Agg backend; each file written atomically).

* ``iteration_time.png``: predicted vs measured iteration time and mean
  utilization per schedule;
* ``timeline_<schedule>.png``: the simulated and the measured timeline one above
  the other, over the same few steady-state iterations (both traces carry the
  IR's labels, e.g. ``1F3``, so a slice can be matched by eye);
* ``loss.png``: emulated vs executed loss per step, one panel per schedule: an exactness
  check (titled so), the two should coincide.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def _plt() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    from stalesim.atomic import savefig_atomic

    try:
        return savefig_atomic(fig, path, dpi=110, bbox_inches="tight")
    finally:
        _plt().close(fig)


def iteration_time_figure(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], *,
                          title: str = "") -> Path:
    """Grouped bars: iteration time (ms) and mean utilization, predicted vs measured."""
    plt = _plt()
    names = [r["schedule"] for r in rows]
    x = list(range(len(names)))
    w = 0.38
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6.0, 0.9 * len(names) + 2), 6.2), sharex=True)

    def ms(v: Any) -> float:
        return v * 1e3 if isinstance(v, (int, float)) and math.isfinite(v) else 0.0

    p = [ms(r.get("predicted_iteration_time_s")) for r in rows]
    m = [ms(r.get("measured_iteration_time_s")) for r in rows]
    ax1.bar([i - w / 2 for i in x], p, w, label="predicted (simulator)", color="#4C72B0")
    ax1.bar([i + w / 2 for i in x], m, w, label="measured (executor)", color="#DD8452")
    for i, r in enumerate(rows):
        e = r.get("time_error")
        if isinstance(e, (int, float)) and math.isfinite(e):
            ax1.text(i, max(p[i], m[i]) * 1.02, f"{e:+.1%}", ha="center", va="bottom", fontsize=8)
    ax1.set_ylabel("iteration time (ms)")
    ax1.set_ylim(0, max([*p, *m, 1e-9]) * 1.15)  # room for the error labels above the bars
    # above the axes, beside the title: over the bars it hid the tallest schedule's pair
    ax1.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    if title:  # above the legend: beside it, a narrow figure (two schedules) ran one into the other
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    pu = [r.get("predicted_utilization_mean") or 0.0 for r in rows]
    mu = [r.get("measured_utilization_mean") or 0.0 for r in rows]
    ax2.bar([i - w / 2 for i in x], pu, w, color="#4C72B0")
    ax2.bar([i + w / 2 for i in x], mu, w, color="#DD8452")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("mean utilization")
    ax2.set_xticks(x)
    ax2.set_xticklabels(names, rotation=30, ha="right")
    return _save(fig, path)


def _draw(ax: Any, events: Sequence[Any], lo_us: float, hi_us: float, n_dev: int, label: str) -> None:
    from stalesim.sim.plot import COLORS

    for e in events:
        if e.dur_us <= 0 or e.ts_us + e.dur_us < lo_us or e.ts_us > hi_us:
            continue
        comm = e.tid == "comm"
        y = e.pid + (0.62 if comm else 0.0)
        h = 0.25 if comm else 0.55
        x0 = (max(e.ts_us, lo_us) - lo_us) / 1e3
        wd = (min(e.ts_us + e.dur_us, hi_us) - max(e.ts_us, lo_us)) / 1e3
        ax.broken_barh([(x0, wd)], (y, h), facecolors=COLORS.get(e.cat, "#999999"),
                       edgecolors="black", linewidth=0.3)
        if not comm and wd > (hi_us - lo_us) / 1e3 / 40:
            ax.text(x0 + wd / 2, y + h / 2, e.name, ha="center", va="center", fontsize=6)
    ax.set_yticks([d + 0.45 for d in range(n_dev)])
    ax.set_yticklabels([f"dev {d}" for d in range(n_dev)])
    ax.set_ylim(-0.1, n_dev)
    ax.invert_yaxis()
    ax.set_title(label, fontsize=9, loc="left")


def timeline_figure(sim_events: Sequence[Any], sim_window_us: tuple[float, float],
                    measured_events: Sequence[Any], measured_window_us: tuple[float, float],
                    n_dev: int, path: str | os.PathLike[str], *, title: str = "") -> Path:
    """Simulated (top) and measured (bottom) timelines, each over its own window (the same
    batches), drawn from the window's start on one time axis (ms) long enough for both."""
    from matplotlib.patches import Patch

    from stalesim.sim.plot import COLORS

    plt = _plt()
    span = max(sim_window_us[1] - sim_window_us[0], measured_window_us[1] - measured_window_us[0], 1.0)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(12, 1.6 + 1.3 * n_dev), sharex=True)
    # each panel shows its own window (the same batches), on a common axis
    _draw(a1, sim_events, sim_window_us[0], sim_window_us[1], n_dev, "simulated")
    _draw(a2, measured_events, measured_window_us[0], measured_window_us[1], n_dev, "measured")
    a2.set_xlim(0, span / 1e3)
    a2.set_xlabel("ms from the start of the window")
    kinds = sorted({e.cat for e in list(sim_events) + list(measured_events) if e.cat in COLORS})
    a1.legend(handles=[Patch(color=COLORS[k], label=k) for k in kinds], fontsize=7, ncol=len(kinds) or 1,
              loc="lower right", bbox_to_anchor=(1.0, 1.0))
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    return _save(fig, path)


def loss_figure(curves: dict[str, tuple[Sequence[float | None], Sequence[float | None]]],
                path: str | os.PathLike[str]) -> Path:
    """One panel per schedule: executed loss per step (line) and emulated (markers)."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    n = max(1, len(curves))
    cols = min(5, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols, 2.3 * rows), squeeze=False)
    for ax, (name, (emu, exe)) in zip([a for r in axes for a in r], curves.items()):
        xs = [i for i, v in enumerate(exe) if v is not None]
        ax.plot(xs, [exe[i] for i in xs], color="#DD8452", label="executed")
        ys = [i for i, v in enumerate(emu or []) if v is not None]
        ax.plot(ys, [emu[i] for i in ys], "o", ms=3, color="#4C72B0", label="emulated")
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        # plain values (an offset like "+2.306" hid which loss it is), whole steps, few ticks
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.yaxis.set_major_locator(MaxNLocator(4))
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
    for ax in [a for r in axes for a in r][len(curves):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=7)
    # per axis, not fig.supxlabel: the layout does not make room for a figure-level label
    for ax in axes[-1]:
        ax.set_xlabel("step", fontsize=8)
    for r in axes:
        r[0].set_ylabel("loss", fontsize=8)
    # what the figure is for: without it a reader looked for a trend in two curves that
    # are meant to be one (the emulator replays the executed run's arithmetic)
    import textwrap

    fig.suptitle(textwrap.fill(LOSS_TITLE, width=int(16 * 2.8 * cols)), fontsize=9)  # ~16 chars an inch
    fig.tight_layout()  # room for each panel's tick labels (they ran into the neighbour's)
    return _save(fig, path)


LOSS_TITLE = "Exactness check: emulated (dots) and executed (line) loss per step should coincide"
