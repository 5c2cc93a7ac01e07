"""Several stored ``validate`` runs of one model, side by side: every schedule re-predicted
with today's cost model from each run's own measurements, its error per run, and its mean
over the runs.

On a shared 2-vCPU machine one run's time errors move by day as much as any mechanism added
(docs/validate.md): the char-GPT's command measured a median |error| of 2.8% one day and
10.8% the next, all 18 schedules optimistic, and 3.6% with mixed signs the morning after.
A term of the model shows as an error of one sign in every run; the machine's moments
average out over runs. So this prints, per schedule, the errors of each run (with that
run's noise floor), their mean, and whether all of them have one sign; and over the
schedules the median and max of |mean|. Nothing is re-measured: each folder needs what
``bench_stage_estimators`` needs (``summary.json``, ``hardware.json``, the profiles).

    python -m experiments.bench_across_runs docs/results/validate_gptchar_cpu2_passes_2026-11-29 \\
        docs/results/validate_gptchar_cpu2_gapfix_2026-11-29 --out across.json

``--lost-from HARDWARE_JSON`` re-predicts every run with the compute a message takes from a
computing rank (``lost_sender`` / ``lost_receiver`` of the per-message calibration in that
file's ``executor_comm``, or of a bare ``measure_comm`` JSON) added to the run's own
calibration: a term measured once on this machine, tried on runs that stored no such
measurement.

``--host-cores N`` re-predicts every run as if its ranks shared N cores (the time slices of
ranks that outnumber the cores, :mod:`stalesim.validate.cores`): for runs stored before
``validate`` recorded the cores (``cost_model.host_cores``), e.g. a 3-rank run on this
2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.attribute_validate import load_run, predict_row
from experiments.block_ratios import save_json
from stalesim.cli.common import positive_int

#: what a folder must hold to be re-predicted
NEEDED = ("summary.json", "hardware.json", "profile.json")


#: the per-message calibration's quantities ``--lost-from`` brings into a stored run
LOST = ("lost_sender", "lost_receiver")


def lost_fits(path: Path) -> dict[str, Any]:
    """``lost_*`` fits from a hardware JSON (its ``executor_comm``) or a ``measure_comm`` JSON."""
    doc = json.loads(path.read_text())
    comm = doc.get("executor_comm", doc) if isinstance(doc, dict) else {}
    fits = {q: comm[q] for q in LOST if isinstance(comm, dict) and q in comm}
    if not fits:
        raise ValueError(f"{path} has no {' or '.join(LOST)} fit")
    return fits


def errors_of(out: Path, lost: dict[str, Any] | None = None,
              host_cores: int | None = None) -> dict[str, dict[str, float]]:
    """Per schedule of the stored run ``out``: ``{"error", "noise_floor", "stored_error"}``
    (the error re-predicted with today's code, with ``lost`` added to the run's per-message
    calibration and ``host_cores`` as the cores its ranks shared, if given; the one
    ``validate`` stored then)."""
    run = load_run(out)
    if lost and run.cm.comm:
        run.cm.comm = {**run.cm.comm, **lost}
    if host_cores is not None:
        run.cm.host_cores = host_cores
    got: dict[str, dict[str, float]] = {}
    for row in run.summary["rows"]:
        measured = row.get("measured_iteration_time_s")
        if not measured:
            continue
        r, _info, _tc = predict_row(run, row)
        got[row["schedule"]] = {"error": r.iteration_time_s / measured - 1.0,
                                "noise_floor": float(row.get("noise_floor") or 0.0),
                                "stored_error": float(row.get("time_error") or 0.0)}
    return got


def side_by_side(runs: list[Path], lost: dict[str, Any] | None = None,
                 host_cores: int | None = None) -> dict[str, Any]:
    """Every run's errors, and per schedule present in all runs the mean error and its sign."""
    per_run: dict[str, dict[str, dict[str, float]]] = {}
    for p in runs:  # a folder given twice is predicted once (its prediction depends only on the folder)
        if str(p) not in per_run:
            per_run[str(p)] = errors_of(p, lost, host_cores)
    common = [s for s in next(iter(per_run.values())) if all(s in e for e in per_run.values())]
    rows = []
    for s in common:
        es = [per_run[str(p)][s]["error"] for p in runs]
        sign = "all-" if all(e < 0 for e in es) else ("all+" if all(e > 0 for e in es) else "mixed")
        rows.append({"schedule": s, "errors": es, "noise_floors": [per_run[str(p)][s]["noise_floor"] for p in runs],
                     "mean_error": statistics.fmean(es), "sign": sign})
    means = [abs(r["mean_error"]) for r in rows]
    per = {str(p): {"median_abs_error": statistics.median(abs(v["error"]) for v in e.values()),
                    "max_abs_error": max(abs(v["error"]) for v in e.values())} for p, e in per_run.items()}
    return {"runs": [str(p) for p in runs], "rows": rows, "per_run": per,
            "median_abs_mean_error": statistics.median(means) if means else None,
            "max_abs_mean_error": max(means) if means else None,
            "schedules_one_sign": sum(1 for r in rows if r["sign"] != "mixed"),
            "schedules_mean_negative": sum(1 for r in rows if r["mean_error"] < 0)}


def print_table(res: dict[str, Any]) -> None:
    names = [Path(p).name for p in res["runs"]]
    print("schedule".ljust(22) + "".join(n[-24:].rjust(26) for n in names) + "    mean  sign")
    for r in res["rows"]:
        cells = "".join(f"{100 * e:+6.1f}% (noise {100 * n:4.1f}%)".rjust(26)
                        for e, n in zip(r["errors"], r["noise_floors"]))
        print(r["schedule"].ljust(22) + cells + f"  {100 * r['mean_error']:+6.1f}%  {r['sign']}")
    print("per run, median / max |error|: " + "; ".join(
        f"{Path(p).name} {100 * v['median_abs_error']:.1f}% / {100 * v['max_abs_error']:.1f}%"
        for p, v in res["per_run"].items()))
    print(f"mean over runs: median |mean| {100 * res['median_abs_mean_error']:.1f}%, max "
          f"{100 * res['max_abs_mean_error']:.1f}%; {res['schedules_one_sign']} of {len(res['rows'])} schedules "
          f"of one sign in every run; {res['schedules_mean_negative']} with a negative mean (optimistic)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_across_runs", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="stored validate folders (two or more)")
    p.add_argument("--out", default=None, help="write the table as JSON")
    p.add_argument("--lost-from", type=Path, default=None,
                   help="a hardware JSON (or measure_comm JSON) whose lost_sender / lost_receiver fits "
                        "every run is re-predicted with")
    p.add_argument("--host-cores", type=positive_int, default=None,
                   help="re-predict every run with its ranks sharing this many cores")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        print("bench_across_runs: error: runs: give two or more validate folders", file=sys.stderr)
        return 2
    lost = None
    if args.lost_from is not None:
        try:
            lost = lost_fits(args.lost_from)
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            print(f"bench_across_runs: error: --lost-from: {exc}", file=sys.stderr)
            return 2
    for d in args.runs:
        missing = [f for f in NEEDED if not (d / f).is_file()]
        if missing:
            print(f"bench_across_runs: error: runs: {d} lacks {', '.join(missing)}", file=sys.stderr)
            return 2
    res = side_by_side(list(args.runs), lost, args.host_cores)
    if not res["rows"]:
        print("bench_across_runs: error: runs: no schedule is in every run", file=sys.stderr)
        return 2
    print_table(res)
    if args.out:
        save_json(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
