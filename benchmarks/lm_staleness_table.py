"""docs/RESULTS.md's char-GPT staleness table, rebuilt from the stored study tables.

``python -m benchmarks.lm_staleness_table [DIR]`` prints the markdown of
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
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "results" / "gptchar_shakespeare_staleness"
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
    out: list[str] = []
    for opt, title in OPTIMIZERS:
        rows = _rows(folder / opt / "table.csv")
        by = {(r["schedule"], int(r["stages"]), r["mitigation"]): r for r in rows}
        seq_row = next(r for r in rows if r["schedule"] == "sequential")
        seq = float(seq_row["val_loss_mean"])
        out.append(f"**{title}** (sequential: {_cell(seq_row, None, seq)})")
        out.append("")
        out.append("| schedule | S | staleness depth | " + " | ".join(t for _, t in MITIGATIONS) + " |")
        out.append("| --- | ---: | ---: |" + " ---: |" * len(MITIGATIONS))
        keys = sorted({(r["schedule"], int(r["stages"])) for r in rows if r["schedule"] != "sequential"},
                      key=lambda k: (["stale", "pipedream", "2bw"].index(k[0]) if k[0] in ("stale", "pipedream",
                                                                                         "2bw") else 9, k[1]))
        for sched, S in keys:
            none = by.get((sched, S, "none"))
            depth = none["depth"] if none else "?"
            cells = [_cell(by.get((sched, S, m)), none, seq) for m, _ in MITIGATIONS]
            out.append(f"| {sched} | {S} | {depth} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT), end="")
