"""Depth scaling of a study: iterations to a target loss per row, the slowdown against one
stage, and its plot (slowdown against the number of pipeline stages S).

Jung et al. (2026, "Mitigating staleness in asynchronous pipeline parallelism via basis
rotation") measure how many more iterations an asynchronous pipeline needs to reach a
loss as it gets deeper (their 5.81x for Adam from 1 to 32 stages); a study over
``--depths 1,2,4,...`` with ``--target-loss`` gives the same quantity for what the
emulator trains. The target rule (the first iteration whose trailing mean of ``smooth``
training losses is at or below the target) and the interval over seeds are
:mod:`stalesim.plan.convergence`'s, so a depth study and ``stalesim plan`` count the
same iterations.

**Slowdown** of a row = its mean iterations to target / those of the row with the same
schedule, mitigation and optimizer at S = 1 (else the study's placement-free baseline,
e.g. ``sequential``). A row whose seeds do not all reach the target has no iterations
(``None``, as in the plan) and so no slowdown, only a lower bound (``slowdown_at_least``: the
seeds that did not reach it counted as reaching it one iteration after the horizon); the table
says how many seeds reached it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stalesim.atomic import savefig_atomic, write_csv_atomic, write_text_atomic
from stalesim.errors import StalesimError
from stalesim.plan.convergence import Target, iterations_to_loss, seed_interval

# a depth study with thousands of stages is a typo (the IR and the model refuse it later, slowly)
MAX_DEPTH = 4096


def parse_depths(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: distinct stage counts, each at least 1."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            s = int(part)
        except ValueError:
            raise StalesimError(f"depths: cannot read {part!r} (comma-separated stage counts, e.g. 1,2,4,8)") \
                from None
        if not 1 <= s <= MAX_DEPTH:
            raise StalesimError(f"depths: {s} stages is outside 1..{MAX_DEPTH}")
        if s in out:
            raise StalesimError(f"depths: {s} given twice")
        out.append(s)
    return out


def depth_placements(depths: list[int]) -> list[list[int] | int]:
    """The study's placements for these stage counts (S = 1: no partition; else S stages, the
    model's default split), as :func:`stalesim.emulator.study.expand` takes them."""
    return [[] if s == 1 else s for s in depths]


def depth_rows(results: list[dict[str, Any]], target: Target) -> list[dict[str, Any]]:
    """One row per (optimizer, schedule, S, mitigation): seeds, seeds that reached the target,
    the mean and 95 % interval of iterations to it (all seeds reaching it), and the slowdown."""
    if target.kind != "loss":
        raise StalesimError("target: a depth study counts iterations to a training-loss target")
    groups: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    for r in results:
        opt = (r.get("config") or {}).get("optimizer") or r.get("optimizer") or "?"
        groups.setdefault((opt, r["schedule"], int(r["stages"]), r.get("mitigation", "none")), []).append(r)
    rows = []
    for (opt, sched, stages, mit), rs in groups.items():
        its = [iterations_to_loss(r.get("losses") or [], target.value, target.smooth) for r in rs]
        reached = [n for n in its if n is not None]
        iv = seed_interval(reached) if reached and len(reached) == len(its) else None
        rows.append({"optimizer": opt, "schedule": sched, "stages": stages, "mitigation": mit,
                     "seeds": len(rs), "reached": len(reached),
                     "iterations_mean": None if iv is None else iv.mean,
                     "iterations_lo": None if iv is None else iv.lo,
                     "iterations_hi": None if iv is None else iv.hi,
                     "per_seed": its, "horizon": max(len(r.get("losses") or []) for r in rs),
                     "slowdown": None, "slowdown_at_least": None, "baseline": None})
    _add_slowdowns(rows)
    rows.sort(key=lambda r: (r["optimizer"], r["schedule"], r["mitigation"], r["stages"]))
    return rows


def _add_slowdowns(rows: list[dict[str, Any]]) -> None:
    from stalesim.schedule import get_spec

    for r in rows:
        same = [b for b in rows if b["optimizer"] == r["optimizer"] and b["stages"] == 1
                and b["schedule"] == r["schedule"] and b["mitigation"] == r["mitigation"]]
        base = same or [b for b in rows if b["optimizer"] == r["optimizer"] and get_spec(b["schedule"]).placement_free]
        ref = base[0]["iterations_mean"] if base else None
        if base:
            r["baseline"] = f"{base[0]['schedule']} S=1 {base[0]['mitigation']}"
        if ref and r["iterations_mean"] is not None:
            r["slowdown"] = r["iterations_mean"] / ref
        elif ref:  # a seed short of the target needs more than the horizon: a bound, not a value
            n = [x if x is not None else r["horizon"] + 1 for x in r["per_seed"]]
            r["slowdown_at_least"] = sum(n) / len(n) / ref


def read_depth_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a stored ``depth.csv`` (as :func:`depth_rows` made them), for a figure that
    puts several studies (one per optimizer) on one plot."""
    import csv
    import json

    def num(x: str) -> float | None:
        return None if x == "" else float(x)

    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            out.append({"optimizer": r["optimizer"], "schedule": r["schedule"], "stages": int(r["stages"]),
                        "mitigation": r["mitigation"], "seeds": int(r["seeds"]), "reached": int(r["reached"]),
                        **{k: num(r[k]) for k in ("iterations_mean", "iterations_lo", "iterations_hi",
                                                  "slowdown", "slowdown_at_least")},
                        "baseline": r["baseline"] or None, "horizon": int(r["horizon"]),
                        "per_seed": json.loads(r["per_seed"])})
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m stalesim.plan.depth OUT.png STUDY_DIR...``: one slowdown plot of the
    studies' stored ``depth.csv`` files (e.g. one study per optimizer)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        raise StalesimError("depth: usage: python -m stalesim.plan.depth OUT.png STUDY_DIR...")
    rows = [r for d in args[1:] for r in read_depth_csv(Path(d) / "depth.csv")]
    import json

    target = json.loads((Path(args[1]) / "study.json").read_text())
    title = f"{target['base']['model']}\ntraining loss <= {target['target_loss']:g} " \
            f"(mean of the last {target['target_smooth']} iterations)"
    print(plot_slowdown(rows, Path(args[0]), title=title))
    return 0


COLUMNS = ["optimizer", "schedule", "stages", "mitigation", "seeds", "reached", "iterations_mean",
           "iterations_lo", "iterations_hi", "slowdown", "slowdown_at_least", "baseline", "horizon", "per_seed"]


def write_depth_table(rows: list[dict[str, Any]], target: Target, out: Path) -> list[Path]:
    """``depth.csv`` and ``depth.md`` in ``out``."""
    import json

    csv = write_csv_atomic(out / "depth.csv",
                           [{k: json.dumps(r[k]) if isinstance(r[k], list) else r[k] for k in COLUMNS}
                            for r in rows], header=COLUMNS)
    lines = [f"Target: {target.describe()}.", "",
             "| optimizer | schedule | S | mitigation | reached | iterations to target (95 % CI) | slowdown vs S = 1 |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        if r["iterations_mean"] is None:
            its = f"not reached in {r['horizon']}"
        else:
            its = f"{r['iterations_mean']:.1f} ({r['iterations_lo']:.0f}-{r['iterations_hi']:.0f})"
        slow = (f"{r['slowdown']:.2f}x" if r["slowdown"] is not None else
                f"> {r['slowdown_at_least']:.2f}x" if r["slowdown_at_least"] is not None else "n/a")
        lines.append(f"| {r['optimizer']} | {r['schedule']} | {r['stages']} | {r['mitigation']} | "
                     f"{r['reached']}/{r['seeds']} | {its} | {slow} |")
    md = write_text_atomic(out / "depth.md", "\n".join(lines) + "\n")
    return [csv, md]


def plot_slowdown(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Slowdown (iterations to target / S = 1's) against S on log2 axes, one line per
    (optimizer, schedule, mitigation); a depth where some seed missed the target is drawn as
    its lower bound (an upward triangle, not joined to the line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["slowdown"] is not None and r["iterations_mean"] is not None:
            series.setdefault((r["optimizer"], r["schedule"], r["mitigation"]), []).append(r)
    fig, ax = plt.subplots(figsize=(6, 4))
    for (opt, sched, mit), rs in sorted(series.items()):
        rs.sort(key=lambda r: r["stages"])
        base = rs[0]["iterations_mean"] / rs[0]["slowdown"]
        lo = [r["slowdown"] - r["iterations_lo"] / base for r in rs]
        hi = [r["iterations_hi"] / base - r["slowdown"] for r in rs]
        label = f"{opt}, {sched}" + ("" if mit == "none" else f" + {mit}")
        line = ax.errorbar([r["stages"] for r in rs], [r["slowdown"] for r in rs], yerr=[lo, hi],
                           marker="o", capsize=3, label=label)
        bounds = [r for r in rows if (r["optimizer"], r["schedule"], r["mitigation"]) == (opt, sched, mit)
                  and r["slowdown_at_least"] is not None]
        if bounds:
            ax.plot([r["stages"] for r in bounds], [r["slowdown_at_least"] for r in bounds], "^",
                    color=line[0].get_color(), ms=8, mfc="none")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    from matplotlib.ticker import ScalarFormatter

    stages = sorted({r["stages"] for r in rows})
    if stages:
        ax.set_xticks(stages)
    for axis in (ax.xaxis, ax.yaxis):  # 1, 2, 4 rather than 2^0, 2^1, 2^2
        axis.set_major_formatter(ScalarFormatter())
    ax.axhline(1.0, color="k", lw=0.8, alpha=0.5)
    ax.set_xlabel("pipeline stages S")
    ax.set_ylabel("iterations to target / S = 1's")
    ax.set_title(title + "\n(open triangle: a lower bound, some seed never reached the target)", fontsize=7)
    ax.grid(alpha=0.3, which="both")
    if series:
        ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        return savefig_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
