"""Accuracy figures: read stored study tables, never train.

A study (``stalesim study --out DIR``) leaves ``DIR/study.json`` (its base
config) and ``DIR/table.csv`` (mean ± std over seeds). The figures collect
every study of a model/dataset stored under ``docs/results``, and each CSV row
names the study folder it came from. ``runs/`` is deliberately not searched: it
holds the user's own runs, and a committed figure must regenerate byte-identical
whatever the user trained (a study there would change the figure and its baseline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.figures import paper
from stalesim.figures.common import pyplot, read_csv, save, write_csv
from stalesim.schedule.style import DEPTH_AXIS_LABEL
from stalesim.summary import get as summary_get

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _spec(row: dict[str, Any]) -> Any:
    from stalesim.schedule import get_spec

    return get_spec(row["schedule"])

# only stored, committed artifacts (see the module docstring for why not runs/)
SEARCH_ROOTS = (Path("docs/results"),)


def find_studies(model: str, dataset: str, roots: tuple[Path, ...] = SEARCH_ROOTS) -> list[Path]:
    """Single-worker study folders of this model/dataset; a study stored twice (its ``study.json``
    identical, e.g. a run folder and its copy in ``docs/results``) counts once, the first root winning."""
    out, seen = [], set()
    for root in roots:
        if not root.is_dir():
            continue
        for sj in sorted(root.rglob("study.json")):
            try:
                text = sj.read_text()
                base = json.loads(text)["base"]
            except (OSError, ValueError, KeyError):
                continue
            if base.get("model") == model and base.get("dataset") == dataset and (sj.parent / "table.csv").exists():
                if text in seen or (base.get("workers") or 1) != 1:  # data-parallel studies: not this figure
                    continue
                seen.add(text)
                out.append(sj.parent)
    return out


def find_flat_tables(model: str, dataset: str, roots: tuple[Path, ...] = SEARCH_ROOTS) -> list[Path]:
    """Study tables stored flat as ``<root>/<model>_<dataset>_*.csv`` (no study.json beside them)."""
    out = []
    for root in roots:
        if root.is_dir():
            out += sorted(p for p in root.glob(f"{model}_{dataset}_*.csv")
                          if read_csv(p) and "test_acc_mean" in read_csv(p)[0])
    return out


def collect(model: str, dataset: str, roots: tuple[Path, ...] = SEARCH_ROOTS) -> list[dict[str, Any]]:
    """Rows of every matching study; a (schedule, PPV, mitigation, length) seen twice keeps more seeds.

    Flat tables carry no config; their length/batch/lr are left empty (see the table's own .md).
    """
    best: dict[tuple, dict[str, Any]] = {}
    sources: list[tuple[Path, dict[str, Any]]] = [
        (d / "table.csv", json.loads((d / "study.json").read_text())["base"])
        for d in find_studies(model, dataset, roots)]
    sources += [(p, {}) for p in find_flat_tables(model, dataset, roots)]
    for table, base in sources:
        d = table.parent if table.name == "table.csv" else table
        length = (f"{base['epochs']} epoch{'s' if base['epochs'] != 1 else ''}" if base.get("epochs") else
                  f"{base['iterations']} iterations" if base.get("iterations") else None)
        for r in read_csv(table):
            if not r.get("test_acc_mean"):
                continue
            row = {"schedule": r["schedule"], "ppv": json.loads(r["ppv"]), "stages": int(r["stages"]),
                   "mitigation": r["mitigation"], "staleness": json.loads(r["staleness"]),
                   "depth": int(r["depth"]), "seeds": int(r["seeds"]), "diverged": int(r["diverged"]),
                   "test_acc_mean_pct": 100 * float(r["test_acc_mean"]),
                   "test_acc_std_pct": 100 * float(r["test_acc_std"] or 0),
                   "length": length, "batch_size": base.get("batch_size"), "lr": base.get("lr"),
                   "switch_epoch": base.get("switch_epoch"), "source": str(d)}
            key = (row["schedule"], tuple(row["ppv"]), row["mitigation"], length, row["batch_size"], row["lr"])
            if key not in best or best[key]["seeds"] < row["seeds"]:
                best[key] = row
    return list(best.values())


def lenet5_accuracy_vs_depth(out: Path, ctx: Any = None, roots: tuple[Path, ...] = SEARCH_ROOTS) -> list[Path]:
    """LeNet-5/MNIST test accuracy vs staleness depth (+ mitigations, hybrid) from stored studies."""
    rows = collect("lenet5", "mnist", roots)
    if not rows:
        (out / "lenet5_accuracy_vs_depth.csv").unlink(missing_ok=True)
        return []
    # the baseline: a schedule whose result does not depend on the placement (no staleness)
    seq = [r for r in rows if _spec(r).placement_free]
    for r in rows:
        # the sequential row of the same study, else one of the same length, else the only one
        # (a flat table's config is unknown: it is the fallback, named in baseline_source)
        ref = (next((s for s in seq if s["source"] == r["source"]), None)
               or next((s for s in seq if r["length"] and s["length"] == r["length"] and s["lr"] == r["lr"]), None)
               or next((s for s in seq if s["length"] is None), None)
               or (seq[0] if len(seq) == 1 else None))
        r["drop_vs_sequential_pts"] = None if ref is None else ref["test_acc_mean_pct"] - r["test_acc_mean_pct"]
        r["baseline_source"] = None if ref is None else ref["source"]
    rows.sort(key=lambda r: (not _spec(r).placement_free, r["depth"], r["schedule"], r["mitigation"]))
    cols = ["schedule", "ppv", "stages", "mitigation", "staleness", "depth", "seeds", "diverged",
            "test_acc_mean_pct", "test_acc_std_pct", "drop_vs_sequential_pts", "length", "batch_size",
            "lr", "switch_epoch", "source", "baseline_source"]
    csv_path = write_csv(out / "lenet5_accuracy_vs_depth.csv", rows, cols)
    seeds = per_seed(model="lenet5", dataset="mnist", roots=roots)
    seed_cols = ["schedule", "ppv", "mitigation", "depth", "seed", "test_acc_pct", "diverged",
                 "collapsed", "length", "source"]
    paths = [csv_path]
    if seeds:
        paths.append(write_csv(out / "lenet5_accuracy_vs_depth_seeds.csv", seeds, seed_cols))
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.0), gridspec_kw={"width_ratios": [1, 1.25]})
    _depth_panel(left, rows, seeds)
    _mitigation_panel(right, rows, seeds)
    published = paper.STALE_DROPS_4STAGE["lenet5"]
    fig.suptitle("LeNet-5 / MNIST test accuracy. Dots: one seed each (x at the bottom: diverged, NaN loss; "
                 "hollow: collapsed to chance, <= 15 %).\n"
                 "Diamond with bar: mean ± std over the seeds that did not diverge, collapsed ones "
                 f"included (as in RESULTS.md). Paper: PPV (2) drops {published[2]} points.", fontsize=8.5)
    paths.append(save(fig, out / "lenet5_accuracy_vs_depth.png"))
    return paths


COLLAPSED = 0.15  # final test accuracy at or below this is a collapsed net (chance: 11.35 % on MNIST)


def per_seed(model: str, dataset: str, roots: tuple[Path, ...] = SEARCH_ROOTS) -> list[dict[str, Any]]:
    """Every run of the matching studies that stored per-seed summaries (results_per_seed.jsonl,
    else results.jsonl), one row per run: accuracy in %, diverged, collapsed, length, source."""
    out: list[dict[str, Any]] = []
    for d in find_studies(model, dataset, roots):
        base = json.loads((d / "study.json").read_text())["base"]
        length = (f"{base['epochs']} epoch{'s' if base['epochs'] != 1 else ''}" if base.get("epochs") else
                  f"{base['iterations']} iterations" if base.get("iterations") else None)
        f = d / "results_per_seed.jsonl"
        f = f if f.exists() else d / "results.jsonl"
        if not f.exists():
            continue
        for line in f.read_text().splitlines():
            r = json.loads(line)
            acc = r.get("final_test_accuracy")
            div = bool(r.get("diverged")) or acc is None
            out.append({"schedule": r["schedule"], "ppv": r["ppv"], "mitigation": r.get("mitigation", "none"),
                        "depth": max(summary_get(r, "staleness_ir")), "seed": r["seed"],
                        "test_acc_pct": None if div else 100 * acc, "diverged": div,
                        "collapsed": (not div) and acc <= COLLAPSED, "length": length, "source": str(d),
                        "switch_epoch": base.get("switch_epoch")})
    return out


def seed_legend() -> list[Any]:
    """What the seed markers mean (a diverged seed's cross at the bottom most of all: without
    an entry it read as a data point at 2 %)."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], marker="o", ls="none", color="0.3", ms=4.5, label="one seed"),
            Line2D([], [], marker="o", ls="none", color="0.3", mfc="none", ms=4.5,
                   label="seed collapsed to chance (<= 15 %)"),
            Line2D([], [], marker="x", ls="none", color="0.3", ms=7, mew=2, label="diverged seed (NaN loss)"),
            Line2D([], [], marker="D", ls="none", color="k", mfc="0.6", ms=6, label="mean ± std")]


def _dots(ax: Axes, x: float, accs: list[dict[str, Any]], color: str, width: float = 0.25) -> None:
    n = max(len(accs), 1)
    for k, r in enumerate(accs):
        dx = (k - (n - 1) / 2) * width / n
        if r["diverged"]:
            ax.plot(x + dx, 2, "x", color=color, ms=7, mew=2)
        else:
            ax.plot(x + dx, r["test_acc_pct"], "o", ms=4.5, color=color,
                    mfc="none" if r["collapsed"] else color, alpha=0.85)


def _mean_marker(ax: Axes, x: float, row: dict[str, Any] | None, color: str) -> None:
    if row is not None:
        m, sd = row["test_acc_mean_pct"], row["test_acc_std_pct"]
        # the bar stops at 100 %: a bimodal std (one collapsed seed) would otherwise run past it
        ax.errorbar(x, m, yerr=[[min(sd, m)], [min(sd, 100 - m)]], fmt="D", color="k",
                    mfc=color, ms=7, capsize=4, zorder=5)


def _mean_label(row: dict[str, Any], unit: str) -> str:
    """The table's mean and the seeds that did not diverge, written under the x tick: inside the
    axes any height collides with some seed's dot (they span 0-100 %)."""
    return f"{row['test_acc_mean_pct']:.2f} %\n{row['seeds'] - row['diverged']}/{row['seeds']} {unit}"


def _depth_panel(ax: Axes, rows: list[dict[str, Any]], seeds: list[dict[str, Any]]) -> None:
    """Sequential and unmitigated stale at every depth, from the longest study with most seeds."""
    plain = [s for s in seeds if s["mitigation"] == "none" and not _spec(s).switches]
    # a depth study: one that has runs at some staleness (a study of local updates has none)
    deep = {s["source"] for s in plain if s["depth"] > 0}
    plain = [s for s in plain if s["source"] in deep and (s["depth"] > 0 or _spec(s).placement_free)]
    if plain:
        length = max({s["length"] for s in plain}, key=lambda L: (sum(s["length"] == L for s in plain), L or ""))
        src = {s["source"] for s in plain if s["length"] == length}
        pts = [s for s in plain if s["source"] in src]
        tab = [r for r in rows if r["source"] in src and r["mitigation"] == "none"]
    else:  # only aggregate tables: draw the means of the table with the most depths
        length, pts = None, []
        tab = [r for r in rows if r["mitigation"] == "none" and not _spec(r).switches]
        srcs = [r["source"] for r in tab if r["depth"] > 0]
        best = max(set(srcs), key=srcs.count) if srcs else None
        tab = [r for r in tab if r["source"] == best]
    tab = [r for r in tab if r["depth"] > 0 or _spec(r).placement_free]
    depths = sorted({r["depth"] for r in tab} | {s["depth"] for s in pts})
    for dep in depths:
        col = "tab:blue" if dep == 0 else "tab:red"
        _dots(ax, dep, [s for s in pts if s["depth"] == dep], col, width=0.8)
        row = next((r for r in tab if r["depth"] == dep), None)
        _mean_marker(ax, dep, row, col)
    names = {}
    for r in tab:
        names[r["depth"]] = r["schedule"] if r["depth"] == 0 else "PPV\n(" + ",".join(map(str, r["ppv"])) + ")"
        names[r["depth"]] += "\n" + _mean_label(r, "seeds")
    ax.set_xticks(depths, [f"{d}\n{names.get(d, '')}" for d in depths], fontsize=7)
    ax.set_xlim(min(depths) - 0.8, max(depths) + 0.8)
    ax.set(xlabel=DEPTH_AXIS_LABEL, ylabel="test accuracy (%)",
           ylim=(0, 101), title=f"stale weights vs depth ({length or 'stored tables'})")
    ax.grid(alpha=0.3)
    ax.legend(handles=seed_legend(), fontsize=7, loc="center left")  # seeds sit near 100 % or 0-15 %


def _mitigation_panel(ax: Axes, rows: list[dict[str, Any]], seeds: list[dict[str, Any]]) -> None:
    """At the deepest placement: stale with no mitigation, each mitigation, hybrid (same length)."""
    mit = [r for r in rows if r["mitigation"] != "none" or _spec(r).switches]
    if not mit:
        ax.set_axis_off()
        return
    length = mit[0]["length"]
    depth = max(r["depth"] for r in mit)
    def plain(r: dict[str, Any]) -> bool:
        return r["mitigation"] == "none" and not _spec(r).switches

    # baselines of the same length (a flat table's length is unknown: the fallback)
    def baseline(dep: int) -> list[dict[str, Any]]:
        cand = [r for r in rows if r["depth"] == dep and plain(r) and (dep > 0 or _spec(r).placement_free)
                and r["length"] in (length, None)]
        return sorted(cand, key=lambda r: r["length"] is None)[:1]

    order = baseline(0) + baseline(depth) + sorted(
        (r for r in mit if r["length"] == length and r["depth"] == depth),
        key=lambda r: (not _spec(r).switches, r["mitigation"]))
    labels = []
    for x, r in enumerate(order):
        if _spec(r).switches:
            lab, col = f"{r['schedule']}\n(stale {r['switch_epoch']} ep.,\nthen {_spec(r).switch_to})", "tab:green"
        elif r["depth"] == 0:
            lab, col = r["schedule"], "tab:blue"
        elif r["mitigation"] == "none":
            lab, col = "stale\n(no mitigation)", "tab:red"
        else:
            lab, col = "stale +\n" + r["mitigation"].replace("-", "-\n"), "tab:purple"
        pts = [s for s in seeds if s["source"] == r["source"] and s["schedule"] == r["schedule"]
               and s["mitigation"] == r["mitigation"] and s["depth"] == r["depth"]]
        _dots(ax, x, pts, col)
        _mean_marker(ax, x, r, col)
        labels.append(lab + "\n" + _mean_label(r, "seeds" if pts else "seeds\n(no per-seed file)"))
    ax.set_xticks(range(len(order)), labels, fontsize=7)
    ax.set(ylabel="test accuracy (%)", ylim=(0, 101),
           title=f"mitigations at the deepest placement (depth {depth}), {length}")
    ax.grid(alpha=0.3, axis="y")
