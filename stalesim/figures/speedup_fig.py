"""The demo's ``predict_speedup.png``: predicted speed-up against devices, one panel per
(hardware, link), one line per schedule.

Each schedule keeps its one style (:mod:`stalesim.schedule.style`: colour, marker, line
style), so no two schedules look alike. Marker fill says where a point's costs came from
(filled: measured or a roofline estimate, half: interpolated between measured batch
sizes, hollow: extrapolated outside them); a red ring marks a point above the ideal
line. Schedules whose speed-ups coincide (pipedream and stale predict the same time:
the same actions, only the weight versions differ) are drawn side by side, a small
horizontal offset apart, and the panel names them: drawn on one spot, the last one
hid the others. The legend sits right of the panels, never over a line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.figures.common import merge_coincident
from stalesim.schedule.style import schedule_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D
    from matplotlib.typing import FillStyleType

# fill per cost source; roofline and given costs are not measured but are not a guess
# from a neighbouring batch either, so they are drawn full (the panel title says which)
FILLS: dict[str, FillStyleType] = {"measured": "full", "roofline": "full", "given": "full", "interpolated": "left",
         "extrapolated": "none"}
FILL_LABELS: dict[FillStyleType, str] = {"full": "costs measured (or roofline)", "left": "costs interpolated",
               "none": "costs extrapolated"}
# horizontal gap (in devices) between coincident schedules: visible at 2..8 devices,
# far smaller than the gap between device counts
DODGE = 0.15
Series = tuple[str, list[float], list[float]]


def _series(rs: Sequence[dict[str, Any]]) -> list[Series]:
    out: list[Series] = []
    for name in dict.fromkeys(r["schedule"] for r in rs):
        pts = sorted((r["devices"], r["speedup"]) for r in rs if r["schedule"] == name and r["speedup"])
        out.append((name, [float(p[0]) for p in pts], [float(p[1]) for p in pts]))
    return out


def dodged(series: Sequence[Series]) -> tuple[dict[str, float], list[str]]:
    """Each schedule's x offset, and one label per group of coincident schedules
    (``"pipedream = stale"``; within 1% of each other: ``≈``)."""
    offsets = {name: 0.0 for name, _, _ in series}
    groups = []
    for label, _, _ in merge_coincident(series):
        members = label.replace(" ≈ ", " = ").split(" = ")
        if len(members) > 1:
            groups.append(label)
            for j, name in enumerate(members):
                offsets[name] = (j - (len(members) - 1) / 2) * DODGE
    return offsets, groups


def _panel(ax: Axes, rs: Sequence[dict[str, Any]], title: str) -> list[Line2D]:
    series = _series(rs)
    offsets, groups = dodged(series)
    by = {(r["schedule"], r["devices"]): r for r in rs}
    lines = []
    for name, xs, ys in series:
        st = schedule_style(name)
        xo = [x + offsets[name] for x in xs]
        (line,) = ax.plot(xo, ys, color=st.color, linestyle=st.linestyle, lw=1.2, label=name)
        lines.append(line)
        for x, xd, y in zip(xs, xo, ys, strict=True):
            r = by[(name, int(x))]
            ax.plot([xd], [y], marker=st.marker, color=st.color, ms=6, ls="none",
                    fillstyle=FILLS.get(r.get("cost_source", "given"), "full"), markerfacecoloralt="white")
            if r.get("above_ideal"):
                ax.plot([xd], [y], marker="o", ms=13, fillstyle="none", color="red", ls="none")
    ns = sorted({r["devices"] for r in rs})
    ax.plot(ns, ns, ls=":", color="grey", lw=0.8)
    ax.set_title(title, fontsize=8)
    # say which lines were moved apart (the offset is not a measured difference), under the
    # axis where it cannot cover a point
    ax.set_xlabel("devices" + ("\nsame prediction, drawn side by side:\n" + "\n".join(groups) if groups else ""),
                  fontsize=8)
    ax.set_xticks(ns)
    return lines


def _legend(fig: Any, rows: Sequence[dict[str, Any]]) -> Any:
    from matplotlib.lines import Line2D

    handles, labels = [], []
    for name in dict.fromkeys(r["schedule"] for r in rows):
        st = schedule_style(name)
        handles.append(Line2D([], [], color=st.color, marker=st.marker, linestyle=st.linestyle))
        labels.append(name)
    handles.append(Line2D([], [], ls=":", color="grey"))
    labels.append("ideal (= devices)")
    fills: list[FillStyleType] = list(dict.fromkeys(FILLS.get(r.get("cost_source", "given"), "full") for r in rows))
    for fill in fills:
        handles.append(Line2D([], [], marker="o", fillstyle=fill, color="black", ls="none",
                              markerfacecoloralt="white"))
        labels.append(FILL_LABELS[fill])
    if any(r.get("above_ideal") for r in rows):
        handles.append(Line2D([], [], marker="o", ms=10, fillstyle="none", color="red", ls="none"))
        labels.append("above ideal (see warnings)")
    # right of the panels (bbox_inches="tight" keeps it in the file): inside, it covered lines
    return fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
                      frameon=False)


def caption(rows: Sequence[dict[str, Any]]) -> str:
    above = [r for r in rows if r.get("above_ideal")]
    if not above:
        return "no prediction above the ideal line (speed-up <= devices)"
    if all(r.get("cost_source") in ("measured", "interpolated") for r in above):
        return (f"{len(above)} prediction(s) above the ideal line (red rings): implied by the measured "
                "profile inside its range (smaller batches measured cheaper per sample)")
    return f"{len(above)} prediction(s) above the ideal line (red rings): see the warnings"


def prediction_figure(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write the figure of the demo's prediction rows (``predict_grid``'s) to ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from stalesim.atomic import savefig_atomic

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["hardware"], r["link"]), []).append(r)
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(4.2 * max(1, len(groups)), 3.9), squeeze=False)
    for ax, ((hwl, link), rs) in zip(axes[0], groups.items()):
        srcs = sorted({r.get("cost_source", "given") for r in rs})
        _panel(ax, rs, f"{hwl} / {link}\ncosts: {', '.join(srcs)}")
    axes[0][0].set_ylabel("predicted speed-up over 1 device")
    fig.suptitle("Predicted speed-up over one device (simulator)", fontsize=10)
    _legend(fig, rows)
    fig.tight_layout()
    fig.text(0.5, -0.01, caption(rows), ha="center", va="top", fontsize=8)
    try:
        return savefig_atomic(fig, path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
