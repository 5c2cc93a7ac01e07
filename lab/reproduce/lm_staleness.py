"""docs/RESULTS.md's char-GPT staleness table, rebuilt from the stored study tables.

``python -m lab.reproduce lm-staleness [DIR]`` prints the markdown of
``DIR/table.md`` (default ``docs/results/gptchar_shakespeare_staleness``) from
``DIR/sgd/table.csv`` and ``DIR/adamw/table.csv`` (written by ``stalesim study``).
One table per optimizer: a row per (schedule, S), a column per mitigation, each
cell the validation loss after the fixed number of steps (mean ± sample std over
the seeds that did not diverge) and, for a mitigation, the share of the
schedule's gap to sequential that it recovers:
``(L_none - L_mitigated) / (L_none - L_sequential)``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from stalesim.schedule import get_spec

# relative to the repository root, like every stored artifact lab.reproduce.tables reads
DEFAULT = Path("docs/results/gptchar_shakespeare_staleness")
MITIGATIONS = [("none", "no mitigation"), ("weight-prediction", "weight prediction"),
               ("nesterov-lookahead", "Nesterov look-ahead"), ("error-feedback", "error feedback")]
OPTIMIZERS = [("sgd", "SGD, momentum 0.9, lr 0.1"), ("adamw", "AdamW, lr 3e-3, weight decay 0.1")]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _cell(r: dict[str, str] | None, none: dict[str, str] | None, seq: float) -> str:
    if r is None:
        return "-"
    seeds, div = int(r["seeds"]), int(r["diverged"])
    if not r["val_loss_mean"]:
        return f"diverged ({div}/{seeds})"
    m, s = float(r["val_loss_mean"]), float(r["val_loss_std"] or 0.0)
    text = f"{m:.3f} ± {s:.3f}"
    if div:
        text += f" ({div}/{seeds} div.)"
    if none is not None and r is not none and none["val_loss_mean"]:
        gap = float(none["val_loss_mean"]) - seq
        if gap > 0:
            text += f" [{100 * (float(none['val_loss_mean']) - m) / gap:.0f} %]"
    return text


def table(folder: Path = DEFAULT) -> str:
    """One markdown table per optimizer from ``folder/<optimizer>/table.csv``."""
    out: list[str] = []
    for opt, title in OPTIMIZERS:
        rows = _rows(folder / opt / "table.csv")
        by = {(r["schedule"], int(r["stages"]), r["mitigation"]): r for r in rows}
        # the baseline is the schedule whose result does not depend on the placement (sequential)
        seq_row = next(r for r in rows if get_spec(r["schedule"]).placement_free)
        seq = float(seq_row["val_loss_mean"])
        out.append(f"**{title}** ({seq_row['schedule']}: {_cell(seq_row, None, seq)})")
        out.append("")
        out.append("| schedule | S | staleness depth | " + " | ".join(t for _, t in MITIGATIONS) + " |")
        out.append("| --- | ---: | ---: |" + " ---: |" * len(MITIGATIONS))
        # rows in the study's own schedule order (its --schedules), then by S
        order = json.loads((folder / opt / "study.json").read_text(encoding="utf-8"))["schedules"]
        keys = sorted({(r["schedule"], int(r["stages"])) for r in rows if r is not seq_row
                       and not get_spec(r["schedule"]).placement_free},
                      key=lambda k: (order.index(k[0]), k[1]))
        for sched, S in keys:
            none = by.get((sched, S, "none"))
            depth = none["depth"] if none else "?"
            cells = [_cell(by.get((sched, S, m)), none, seq) for m, _ in MITIGATIONS]
            out.append(f"| {sched} | {S} | {depth} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)
