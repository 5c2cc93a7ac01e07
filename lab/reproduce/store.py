"""Copy a study's small artifacts (config, tables, per-seed summaries) into ``docs/results``.

A study folder holds per-run folders with checkpoints and per-step metrics (megabytes); what a
reader of RESULTS.md needs, and what :mod:`lab.reproduce.tables` reads, is the config
(``study.json``), the aggregated table (``table.{csv,md}``) and one line per run without the
per-step losses (``results_per_seed.jsonl``): a few kilobytes, committed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stalesim.atomic import ensure_dir, write_lines_atomic, write_text_atomic
from stalesim.errors import StalesimError

DROPPED = ("losses",)  # per-step lists: in the run folder's metrics.jsonl, not needed by a table


def seed_records(study: Path) -> list[dict[str, Any]]:
    """One dict per run: ``results_per_seed.jsonl`` if stored, else the study's ``results.jsonl``."""
    for name in ("results_per_seed.jsonl", "results.jsonl"):
        f = study / name
        if f.exists():
            return [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    raise StalesimError(f"{study}: no results_per_seed.jsonl or results.jsonl (not a study folder?)")


def store_study(src: Path, dst: Path, command: str | None = None) -> Path:
    """Copy ``src``'s config, table and per-run summaries (without per-step losses) to ``dst``."""
    for name in ("study.json", "table.csv", "table.md"):
        if not (src / name).exists():
            raise StalesimError(f"{src / name}: missing (did the study finish?)")
    ensure_dir(dst)
    for name in ("study.json", "table.csv", "table.md", "study_wall_time_s.txt"):
        if (src / name).exists():
            write_text_atomic(dst / name, (src / name).read_text(encoding="utf-8"))
    recs = [{k: v for k, v in r.items() if k not in DROPPED} for r in seed_records(src)]
    write_lines_atomic(dst / "results_per_seed.jsonl", [json.dumps(r) for r in recs])
    if command:
        write_text_atomic(dst / "command.txt", command.rstrip() + "\n")
    return dst
