"""Gantt chart of a simulated timeline (matplotlib, Agg backend, no display needed).

One row per device for compute (F blue, B orange, the split backward's I gold
and W teal, U green, LOSS grey, the core share of communication hatched) and a
thinner row beneath it for communication (sends, receives, all-reduces).
Labels are drawn on bars wide enough to hold them. ``COLORS`` is the one
colour table of every timeline figure (the validate timelines import it), and
``legend_handles`` its legend, placed below the axes so it never hides a bar.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from stalesim.units import fmt_seconds

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.result import SimResult

# I and W (zero-bubble schedules split B in two) get colours of their own: drawn in the
# fallback grey they looked like LOSS and the W-filled bubbles could not be seen
COLORS = {"F": "#4C72B0", "B": "#DD8452", "I": "#CCA000", "W": "#17A2A8", "U": "#55A868",
          "LOSS": "#8C8C8C", "comm-cpu": "#C44E52", "SEND_F": "#8172B3", "SEND_B": "#937860",
          "RECV_F": "#CCB9F0", "RECV_B": "#E3CFB8", "AR": "#DA8BC3", "ARW": "#F0C6E4"}
# what each colour means, for the legend (the short names alone mean nothing to a newcomer)
LEGEND_LABELS = {"F": "F forward", "B": "B backward", "I": "I input grad", "W": "W weight grad",
                 "U": "U update", "LOSS": "loss", "comm-cpu": "comm (core share)", "SEND_F": "send act.",
                 "SEND_B": "send grad", "RECV_F": "recv act.", "RECV_B": "recv grad",
                 "AR": "all-reduce", "ARW": "all-reduce wait"}
FALLBACK_COLOR = "#999999"
LEGEND_STRIP_IN = 0.3  # inches below the axes for the legend
MAX_LABELS = 400


def legend_handles(kinds: set[str] | frozenset[str]) -> list:
    """Legend patches for the kinds drawn, in the colour table's order (F, B, I, W, U, ...)."""
    from matplotlib.patches import Patch

    return [Patch(color=COLORS[k], label=LEGEND_LABELS[k]) for k in COLORS if k in kinds]


def gantt(result: SimResult, path: str | os.PathLike[str], *, title: str | None = None,
          max_events: int = 50_000) -> Path:
    """Write the Gantt chart of ``result`` (event path) to ``path`` (.png, .svg, .pdf)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    events, _ = result.trace_events()
    events = [e for e in events if e.dur_us > 0][:max_events]
    n_dev = result.timeline.program.sched.num_devices if result.timeline is not None else result.devices
    fig_h = 1.0 + 0.7 * n_dev + LEGEND_STRIP_IN
    fig, ax = plt.subplots(figsize=(12, fig_h))
    scale = 1e-3  # us -> ms
    by_row: dict[tuple[str, float, float], list[tuple[float, float]]] = {}
    labels = []
    for e in events:
        row = e.pid
        y, h = (row - 0.4, 0.5) if e.tid == "compute" else (row + 0.12, 0.25)
        by_row.setdefault((e.cat, y, h), []).append((e.ts_us * scale, e.dur_us * scale))
        labels.append((e, y, h))
    by_color = {cat for cat, _, _ in by_row}
    for (cat, y, h), bars in by_row.items():  # one collection per colour and row: fast
        ax.broken_barh(bars, (y, h), facecolors=COLORS.get(cat, FALLBACK_COLOR),
                       edgecolor="white", linewidth=0.3, hatch="//" if cat == "comm-cpu" else None)
    span = max((e.ts_us + e.dur_us for e in events), default=1.0) * scale
    if len(labels) <= MAX_LABELS:
        for e, y, h in labels:
            if e.tid == "compute" and e.dur_us * scale > span / 60:
                ax.text((e.ts_us + e.dur_us / 2) * scale, y + h / 2, e.name, ha="center",
                        va="center", fontsize=6, color="white")
    ax.set_yticks(range(n_dev))
    ax.set_yticklabels([f"device {d}" for d in range(n_dev)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, span * 1.01)
    trust = "" if result.cost_source in ("measured", "given") else f" [costs {result.cost_source}]"
    if result.warnings:
        trust += f" [{len(result.warnings)} warning(s)]"
    ax.set_title(title or (f"{result.schedule}: S={result.stages} M={result.microbatches} "
                           f"P={result.workers}, {fmt_seconds(result.iteration_time_s)}/batch{trust}"))
    handles = legend_handles(by_color)
    # a strip below the axes (inside, the legend covered the first device's bars)
    fig.legend(handles=handles, loc="lower center", fontsize=7, ncol=min(len(handles), 9), frameon=False)
    fig.tight_layout(rect=(0, LEGEND_STRIP_IN / fig_h, 1, 1))
    from stalesim.atomic import savefig_atomic

    try:
        return savefig_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)
