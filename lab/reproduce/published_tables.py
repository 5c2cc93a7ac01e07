"""RESULTS.md's tables of the published LLM runs (lab.reproduce.published): every row beside
its prediction, the errors per source, and the multi-schedule comparisons ranked both ways."""

from __future__ import annotations

from pathlib import Path

from lab.reproduce.markdown import table
from lab.reproduce.published import comparisons, error_summary, load, read_predicted


def _pct_cell(x: str, signed: bool = True) -> str:
    return "" if x == "" else (f"{float(x):+.1f} %" if signed else f"{float(x):.1f} %")


def published_runs(root: Path) -> str:
    """Every published run beside its prediction (lab.reproduce.published)."""

    out = []
    for r in read_predicted(root):
        if r["status"] != "predicted":
            out.append([r["id"], r["metric"].replace("_", " "), f"{float(r['published']):g}" if r["published"] else "",
                        "", "", r["memory_published_gib"], "", "", r["outcome"], "", r["status"]])
            continue
        out.append([r["id"], r["metric"].replace("_", " "),
                    f"{float(r['published']):g}" if r["published"] else "",
                    f"{float(r['predicted']):.4g}" if r["predicted"] else "", _pct_cell(r["error_pct"]),
                    r["memory_published_gib"], f"{float(r['memory_predicted_gib']):.1f}" if r["memory_predicted_gib"]
                    else "", _pct_cell(r["memory_error_pct"]), r["outcome"], r["fits"],
                    r["verdict"] + ("; " if r["verdict"] else "") + r["detail"]])
    return table(["run", "metric", "published", "predicted", "error", "memory GiB published", "predicted GiB",
                  "memory error", "outcome", "fits", "verdict; detail"],
                 ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---", "---"], out)


def published_runs_summary(root: Path) -> str:
    """Median / max absolute error and verdicts per source of the published runs."""

    rows = read_predicted(root)

    def cells(label: str, rs: list[dict[str, str]]) -> list[str]:
        e = error_summary(rs)
        t = "" if e.time_median is None else f"{e.time_median:.1f} % / {e.time_max:.1f} %"
        m = "" if e.memory_median is None else f"{e.memory_median:.1f} % / {e.memory_max:.1f} %"
        v = f"{e.verdicts_right} of {e.verdicts}" if e.verdicts else ""
        return [label, str(e.rows), str(e.predicted), t, m, v]

    out = [cells(src, [r for r in rows if r["source"] == src]) for src in dict.fromkeys(r["source"] for r in rows)]
    out.append(cells("**all sources**", rows))
    return table(["source", "rows", "predicted", "error of the published metric, median / max",
                  "memory error median / max",
                  "fits verdicts right"], ["---", "---:", "---:", "---:", "---:", "---:"], out)


def published_comparisons(root: Path) -> str:
    """Each published multi-schedule setup: its schedules in the measured order (fastest first)
    and in the order ``plan --workload`` ranks their predictions, and whether the first and the
    whole order agree; a last row counts them."""
    rows = read_predicted(root)
    found = comparisons(load(root), rows)

    def names(c_name: str, ids: tuple[str, ...]) -> str:
        return ", ".join(i.removeprefix(c_name + "-") for i in ids)

    out = [[c.name, names(c.name, c.measured_order), names(c.name, c.predicted_order),
            "yes" if c.agrees else "no", "yes" if c.predicted_order == c.measured_order else "no"]
           for c in found]
    out.append(["**all setups**", "", "", f"{sum(c.agrees for c in found)} of {len(found)}",
                f"{sum(c.predicted_order == c.measured_order for c in found)} of {len(found)}"])
    return table(["setup", "measured, fastest first", "predicted (plan --workload's order)", "first right",
                  "order right"], ["---", "---", "---", "---:", "---:"], out)
