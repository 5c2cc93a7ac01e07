"""Shared helpers: CSV + figure writing, and the cached "shape" profiles.

A *shape profile* is a profile measured at a tiny batch with one repeat: its
times are meaningless (CPU, one sample, a loaded machine), but its per-block
FLOPs and bytes are exact and scale linearly with the batch
(``Profile.at_batch_size``). The GPU what-ifs re-time it with the roofline, and
the memory figure reads its bytes, so nothing here depends on this machine's
speed. Shape profiles are stored inputs, kept with the package in
``stalesim/data/shape_profiles/`` (committed, read by the figures, the RESULTS.md tables and the
GPU time estimates), so ``make figures`` does not re-profile unless asked to and its output
folder holds only what it generates.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from stalesim.workloads.profile import Profile

SHAPE_BATCH = 8
# package data (pyproject's package-data), so an installed stalesim finds them too
SHAPE_PROFILES = Path(__file__).resolve().parents[1] / "data" / "shape_profiles"


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Path:
    """Write rows atomically (:mod:`stalesim.atomic`); columns default to the first row's keys."""
    from stalesim.atomic import write_csv_atomic

    cols = list(columns or (rows[0].keys() if rows else []))
    return write_csv_atomic(path, [{k: _cell(r.get(k)) for k in cols} for r in rows], header=cols)


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join(map(str, v))
    return "" if v is None else v


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (no display needed) with the figures' sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})
    return plt


def save(fig: Figure, path: Path, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out (``rect``: the part of the figure the axes may fill, leaving room for a figure
    legend), write atomically, close."""
    import matplotlib.pyplot as plt

    from stalesim.atomic import savefig_atomic

    fig.tight_layout(rect=rect)
    try:
        return savefig_atomic(fig, path)
    finally:
        plt.close(fig)


def shape_profile(model: str, cache_dir: Path = SHAPE_PROFILES, *, refresh: bool = False) -> Profile:
    """The model's shape profile (FLOPs, bytes) at batch SHAPE_BATCH, cached as JSON in ``cache_dir``."""
    from stalesim.atomic import ensure_dir
    from stalesim.workloads.profile import load_profile

    ensure_dir(cache_dir)
    path = cache_dir / f"{model}_b{SHAPE_BATCH}_shape.json"
    if path.exists() and not refresh:
        return load_profile(path)
    import torch

    from stalesim.workloads.profiler import profile_model

    old = torch.get_num_threads()
    try:
        prof = profile_model(model, [SHAPE_BATCH], device="cpu", threads=1, repeats=1, warmup=0)
    finally:
        torch.set_num_threads(old)
    prof.to_json(path)
    return prof


def first(items: Iterable[Any], default: Any = None) -> Any:
    return next(iter(items), default)


def merge_coincident(series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
                     rtol: float = 0.01) -> list[tuple[str, list[float], list[float]]]:
    """Join series that would be drawn on top of each other into one, labelled ``a = b``.

    ``series`` is ``(label, xs, ys)``; two series coincide when their xs are equal and every y
    agrees within ``rtol`` (relative): joined with `` = `` when equal to 1e-6, else `` ≈ ``. A
    plot that draws coincident lines separately hides all but the last one; one line with the
    joined label says they are the same.
    """
    merged: list[tuple[list[str], list[float], list[float], bool]] = []

    def close(a: float, b: float, tol: float) -> bool:
        return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)

    for label, xs, ys in series:
        for k, (labels, mx, my, exact) in enumerate(merged):
            if list(mx) == list(xs) and all(close(a, b, rtol) for a, b in zip(my, ys, strict=True)):
                labels.append(label)
                merged[k] = (labels, mx, my, exact and all(close(a, b, 1e-6) for a, b in zip(my, ys, strict=True)))
                break
        else:
            merged.append(([label], list(xs), list(ys), True))
    return [((" = " if exact else " ≈ ").join(labels), mx, my) for labels, mx, my, exact in merged]


def plain_log_ticks(ax: Axes, axis: str = "both") -> None:
    """Log axes with plain numbers (2, 4, 8) instead of 2x10^0-style labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    for a in ((ax.xaxis, ax.yaxis) if axis == "both" else (ax.xaxis,) if axis == "x" else (ax.yaxis,)):
        lo, hi = a.get_view_interval()
        # under two decades, powers of ten alone leave one labelled tick (or none): add 2 and 5
        if not isinstance(a.get_major_locator(), FixedLocator) and lo > 0 and hi < 100 * lo:
            a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        a.set_major_formatter(fmt)
        a.set_minor_formatter(NullFormatter())
