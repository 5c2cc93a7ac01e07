"""Is the replay's optimism the spread of the action times? Replays every schedule of a finished
``validate`` folder twice from its measured runs' traces: with every action at its mean (the
replay before drawn action times) and with every compute action drawn from the run's own
spread (:func:`stalesim.validate.costmodel.replay`, the median of the draws), against the
measured iteration time. Nothing is measured again.

A simulation at mean costs is optimistic wherever devices wait on each other (the mean of a
maximum exceeds the maximum of the means, :mod:`stalesim.sim.jitter`): if that is the replay's
systematic miss, the drawn replay removes it, schedule by schedule, and leaves a schedule whose
devices never wait unchanged.

    python -m experiments.bench_replay_jitter OUT_DIR [--which median|fastest] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.attribute_validate import load_run, predict_row, rows_from_trace, run_dir_of
from experiments.block_ratios import save_json


def replays(costs: Any, schedule: Any, hw: Any, rows: dict[str, list[list[Any]]],
            window_s: tuple[float, float]) -> tuple[float, float]:
    """The iteration time of ``schedule`` replayed from ``rows`` at mean costs and drawn."""
    from stalesim.sim import SimOptions, simulate
    from stalesim.validate.costmodel import replay, replay_costs, replay_link

    rc = replay_costs(costs, rows, window_s)
    mean = simulate(rc, schedule, replay_link(hw, rc, rows, window_s), SimOptions(keep_timeline=False))
    return mean.iteration_time_s, replay(costs, schedule, hw, rows, window_s).iteration_time_s


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per replay (``mean``, ``drawn``): median |error|, signed median and how many are negative."""
    out = {}
    for k in ("mean", "drawn"):
        e = [r[f"{k}_error"] for r in rows]
        out[k] = {"median_abs_error": statistics.median(abs(x) for x in e), "signed_median": statistics.median(e),
                  "negative": sum(x < 0 for x in e), "n": len(e)}
    return out


def run(out: Path, which: str = "median") -> dict[str, Any]:
    from stalesim.schedule import build_schedule
    from stalesim.validate.measured import measured_timing

    stored = load_run(out)
    rows: list[dict[str, Any]] = []
    for row in stored.summary["rows"]:
        d = run_dir_of(out, row, which)
        if d is None or not (d / "trace.json").exists():
            continue
        _r, info, tc = predict_row(stored, row)
        mrows = rows_from_trace(d / "trace.json")
        sched = build_schedule(tc.schedule_config(stored.cfg.iterations))
        mt = measured_timing({"rows": mrows, "iterations": stored.cfg.iterations}, sched)
        m = mt["iteration_time_s"]
        mean, drawn = replays(info["costs"], info["schedule"], stored.hw, mrows, tuple(mt["window_s"]))
        rows.append({"schedule": row["schedule"], "measured_s": m, "mean_replay_s": mean, "drawn_replay_s": drawn,
                     "mean_error": (mean - m) / m, "drawn_error": (drawn - m) / m})
    if not rows:
        raise ValueError(f"{out}: no run of any schedule kept its trace.json (runs/<schedule>/)")
    return {"folder": str(out), "which": which, "rows": rows, "summary": summarize(rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_replay_jitter", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a validate output folder with its runs/ (the traces)")
    ap.add_argument("--which", default="median", choices=("median", "fastest"),
                    help="which repeat's trace: the median one (as the report's, default) or the fastest")
    ap.add_argument("--out", type=Path, default=None, help="write the rows and the summary as JSON")
    a = ap.parse_args(argv)
    for f in ("summary.json", "hardware.json", "profile.json"):
        if not (a.folder / f).exists():
            print(f"bench_replay_jitter: error: folder: {a.folder} has no {f} (not a validate output folder)",
                  file=sys.stderr)
            return 2
    try:
        res = run(a.folder, a.which)
    except ValueError as exc:
        print(f"bench_replay_jitter: error: folder: {exc}", file=sys.stderr)
        return 2
    print(f"{'schedule':24s} {'measured ms':>11s} {'mean replay':>12s} {'drawn replay':>13s}")
    for r in res["rows"]:
        print(f"{r['schedule']:24s} {r['measured_s'] * 1e3:11.2f} {r['mean_error'] * 100:+11.1f}% "
              f"{r['drawn_error'] * 100:+12.1f}%")
    for k, s in res["summary"].items():
        print(f"{k} replay: median |error| {s['median_abs_error'] * 100:.1f}%, signed median "
              f"{s['signed_median'] * 100:+.1f}%, {s['negative']} of {s['n']} negative")
    if a.out:
        save_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
