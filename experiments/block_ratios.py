"""What the interleaved-condition experiments share: each condition's ratio to a baseline
condition per block, summarized over blocks, printed, and the results written.

A block's ratio is taken between conditions timed interleaved within that block, so the
machine's drift between blocks cancels; the median over blocks with its range is what
``bench_wake`` and ``bench_after_recv`` report."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def ratios_to(rows: list[dict[str, dict[str, float]]], base: str, kinds: tuple[str, ...]
              ) -> dict[str, dict[str, dict[str, float]]]:
    """Per condition other than ``base`` and per kind: ``{"median", "min", "max"}`` over
    ``rows`` (one per block: ``{condition: {kind: seconds}}``) of condition / ``base``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c in rows[0]:
        if c == base:
            continue
        out[c] = {}
        for k in kinds:
            r = [row[c][k] / row[base][k] for row in rows]
            out[c][k] = {"median": statistics.median(r), "min": min(r), "max": max(r)}
    return out


def print_ratios(ratios: dict[str, dict[str, dict[str, float]]], base: str) -> None:
    for c, d in ratios.items():
        print(f"{c} / {base}: " + "  ".join(
            f"{k} median {v['median']:.3f} (range {v['min']:.3f}-{v['max']:.3f})" for k, v in d.items()))


def save_json(path: str | Path, obj: Any) -> Path:
    """``obj`` to ``path`` (its folder made), whole or not at all."""
    from stalesim.atomic import ensure_dir, write_json_atomic

    ensure_dir(Path(path).parent)
    return write_json_atomic(path, obj, indent=1)
