"""Which estimator of the stage times predicts a finished ``validate`` run best? Re-predicts
every schedule of an output folder from what it stored, once per estimator, against the
same measured runs -- no measurement is repeated, so the estimators differ in nothing else.

``validate`` times each stage layout in passes spread between the rounds of its runs, each
pass a fresh process at its own moment of the machine (:class:`~stalesim.validate.stagetime.
LayoutTimer`). Estimators:

* ``pooled``: the mean over every round of every pass (what the cost model predicts from;
  :meth:`~stalesim.validate.stagetime.StageTimes.pooled`);
* ``pass-median``: per (stage, kind) the median over the passes of each pass's mean
  (:meth:`~stalesim.validate.stagetime.StageTimes.with_pass_medians`), as the measured side
  reports the median repeat. Needs a folder whose stage times kept their pass means.
* with ``--per-pass``, also ``pass-K`` for every pass K: the times that pass alone measured
  (:meth:`~stalesim.validate.stagetime.StageTimes.of_pass`). How far a schedule's
  prediction moves between the passes is the prediction's own noise, beside the measured
  runs' noise floor.

Prints per schedule the measured time and each estimator's prediction and error, then each
estimator's median and max |error| over the schedules (with ``--per-pass``, per schedule the
prediction noise of the per-pass predictions, IQR / median, and the median of those);
``--out FILE`` writes them as JSON.

    python -m experiments.bench_stage_estimators OUT_DIR
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.attribute_validate import load_run, predict_row
from experiments.block_ratios import save_json

#: the estimator names, in the order printed
ESTIMATORS = ("pooled", "pass-median")


def pass_index(name: str) -> int | None:
    """K of a ``pass-K`` estimator name, else None."""
    return int(name[5:]) if name.startswith("pass-") and name[5:].isdigit() else None


def estimate(cm: Any, name: str) -> Any:
    """``cm`` (a CostModel) with its stage times as estimator ``name`` gives them."""
    if name == "pooled":
        return cm  # what the cost model predicts from (simulate_with_costs pools the passes)
    if name == "pass-median":
        return cm.with_pass_medians()
    if (k := pass_index(name)) is not None:
        return cm.of_pass(k)
    raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")


def pass_spread(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per schedule: the prediction noise of its ``pass-K`` predictions (IQR / median, as
    ``validate``'s ``prediction_noise`` and ``noise_floor``)."""
    from stalesim.validate.compare import noise_floor

    by: dict[str, list[float]] = {}
    for r in rows:
        if pass_index(r["estimator"]) is not None:
            by.setdefault(r["schedule"], []).append(r["predicted_s"])
    return {n: x for n, v in by.items() if (x := noise_floor(v)) is not None}


def repredict(out: Path, estimators: tuple[str, ...] = ESTIMATORS, per_pass: bool = False) -> dict[str, Any]:
    """Per schedule with a measured time: measured seconds and, per estimator, the predicted
    seconds and the relative error; per estimator the median and max |error|; with
    ``per_pass`` the ``pass-K`` estimators too and each schedule's ``pass_spread``."""
    run = load_run(out)
    passes = run.cm.timing_passes()
    if ("pass-median" in estimators and passes < 3) or (per_pass and passes < 2):
        raise ValueError(f"{out}: its stage times kept no per-pass means (written before they were kept)")
    if per_pass:
        estimators = (*estimators, *(f"pass-{k}" for k in range(passes)))
    rows: list[dict[str, Any]] = []
    for est in estimators:
        cm = estimate(run.cm, est)
        for row in run.summary["rows"]:
            m = row.get("measured_iteration_time_s")
            if not m:
                continue
            r, _info, _tc = predict_row(run, row, cm)
            rows.append({"schedule": row["schedule"], "estimator": est, "measured_s": m,
                         "predicted_s": r.iteration_time_s, "error": (r.iteration_time_s - m) / m})
    agg = {}
    for est in estimators:
        errs = [abs(r["error"]) for r in rows if r["estimator"] == est]
        agg[est] = {"median_abs_error": statistics.median(errs), "max_abs_error": max(errs), "n": len(errs)}
    res: dict[str, Any] = {"folder": str(out), "rows": rows, "aggregate": agg}
    if per_pass:
        res["pass_spread"] = pass_spread(rows)
    return res


def print_table(res: dict[str, Any]) -> None:
    ests = list(res["aggregate"])
    by: dict[str, dict[str, Any]] = {}
    for r in res["rows"]:
        by.setdefault(r["schedule"], {"measured_s": r["measured_s"]})[r["estimator"]] = r
    print(f"{'schedule':24s} {'measured ms':>11s}  " + "  ".join(f"{e:>20s}" for e in ests))
    for name, d in by.items():
        print(f"{name:24s} {d['measured_s'] * 1e3:11.1f}  " + "  ".join(
            f"{d[e]['predicted_s'] * 1e3:10.1f} ({d[e]['error'] * 100:+5.1f}%)" for e in ests))
    for e, a in res["aggregate"].items():
        print(f"{e}: median |error| {a['median_abs_error'] * 100:.1f}%, max {a['max_abs_error'] * 100:.1f}% "
              f"over {a['n']} schedules")
    spread = res.get("pass_spread")
    if spread:
        print("prediction noise over the passes (IQR / median): " + ", ".join(
            f"{n} {v * 100:.1f}%" for n, v in spread.items()))
        print(f"median {statistics.median(spread.values()) * 100:.1f}%, max {max(spread.values()) * 100:.1f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="a validate output folder (summary.json, hardware.json, profile.json)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS),
                    help=f"comma-separated, of: {', '.join(ESTIMATORS)} (default: all)")
    ap.add_argument("--per-pass", action="store_true",
                    help="also predict from each timing pass alone (the prediction's own spread)")
    ap.add_argument("--out", dest="json_out", type=Path, default=None, help="write the rows and aggregates as JSON")
    a = ap.parse_args(argv)
    ests = tuple(e for e in a.estimators.split(",") if e)
    bad = [e for e in ests if e not in ESTIMATORS]
    if bad or not ests:
        ap.error(f"--estimators: unknown {', '.join(bad) or '(none given)'}; known: {', '.join(ESTIMATORS)}")
    for f in ("summary.json", "hardware.json", "profile.json"):
        if not (a.out / f).exists():
            ap.error(f"{a.out}: no {f} (not a validate output folder)")
    try:
        res = repredict(a.out, ests, a.per_pass)
    except ValueError as exc:
        ap.error(str(exc))
    print_table(res)
    if a.json_out:
        save_json(a.json_out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
