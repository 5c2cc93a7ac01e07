"""Gantt chart of a simulated timeline (matplotlib, Agg backend, no display needed).

One row per device for compute (F blue, B orange, U green, LOSS grey, the core
share of communication hatched) and a thinner row beneath it for
communication (sends, receives, all-reduces). Labels are drawn on bars wide
enough to hold them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.result import SimResult

COLORS = {"F": "#4C72B0", "B": "#DD8452", "U": "#55A868", "LOSS": "#8C8C8C",
          "comm-cpu": "#C44E52", "SEND_F": "#8172B3", "SEND_B": "#937860",
          "RECV_F": "#CCB9F0", "RECV_B": "#E3CFB8", "AR": "#DA8BC3", "ARW": "#F0C6E4"}
MAX_LABELS = 400


def gantt(result: SimResult, path: str | os.PathLike[str], *, title: str | None = None,
          max_events: int = 50_000) -> Path:
    """Write the Gantt chart of ``result`` (event path) to ``path`` (.png, .svg, .pdf)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events, _ = result.trace_events()
    events = [e for e in events if e.dur_us > 0][:max_events]
    n_dev = result.timeline.program.sched.num_devices if result.timeline is not None else result.devices
    fig_h = 1.0 + 0.7 * n_dev
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
        ax.broken_barh(bars, (y, h), facecolors=COLORS.get(cat, "#999999"),
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
                           f"P={result.workers}, {result.iteration_time_s * 1e3:.3g} ms/batch{trust}"))
    present = [c for c in COLORS if c in by_color]
    ax.legend(handles=[Patch(color=COLORS[c], label=c) for c in present], loc="upper right",
              fontsize=7, ncol=min(len(present), 6))
    fig.tight_layout()
    from stalesim.atomic import savefig_atomic

    try:
        return savefig_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)
