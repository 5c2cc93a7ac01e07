"""Per schedule and device: the runs' compute over the predicted compute, beside the time
the device spent in receives.

Reads a validate folder's ``attribution.csv`` (``experiments/attribute_validate.py``) and sums
F, B, I and W per (schedule, device), measured and predicted ms per iteration of the median
repeat, and the measured receive time. A ratio that rises with the receive time is the
after-wait term (docs/validate.md); one that differs between devices of one schedule points
at the cores the ranks ran on.

``--rounds``: the same ratio for each repeat (round) of each schedule, read from the runs'
traces (``runs/<schedule>[.r<k>]/trace.json``: F+B+I+W per iteration, the middle half of
the run's batches), over the same prediction. If the machine drifts, every schedule of a
round moves together; a term of the schedule keeps its ratio from round to round.

    python -m experiments.bench_compute_over_predicted runs/val/attribution.csv
    python -m experiments.bench_compute_over_predicted runs/val/attribution.csv --rounds
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from stalesim.validate.stagetime import MODULE_KINDS


def unique_rows(path: str) -> Iterator[dict[str, str]]:
    """The rows of ``attribution.csv``, each (schedule, device, stage, term) once (the file
    repeats rows per stage listing)."""
    seen: set[tuple[str, ...]] = set()
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            key = (r["schedule"], r["device"], r["stage"], r["term"])
            if key not in seen:
                seen.add(key)
                yield r


def ratios(path: str) -> list[tuple[str, str, float, float, float]]:
    """``(schedule, device, measured / predicted compute, receive ms, compute ms)`` rows."""
    comp: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    recv: dict[tuple[str, str], float] = defaultdict(float)
    for r in unique_rows(path):
        dev = (r["schedule"], r["device"])
        if r["term"] in MODULE_KINDS:
            comp[dev][0] += float(r["predicted_ms"])
            comp[dev][1] += float(r["measured_ms"])
        elif r["term"].startswith("RECV"):
            recv[dev] += float(r["measured_ms"])
    return [(s, d, m / p if p else float("nan"), recv[(s, d)], m) for (s, d), (p, m) in sorted(comp.items())]


def trace_compute(trace: str | Path) -> dict[int, float]:
    """Per device of a run's trace: F+B+I+W ms per iteration over the middle half of its
    batches (warm-up and drain left out)."""
    from stalesim.schedule import Action

    doc = json.loads(Path(trace).read_text())
    acts = [(Action.parse(e["name"]), e) for e in doc["traceEvents"]
            if e.get("ph") == "X" and " " not in e["name"]]  # not the simulator's "<label> cpu" slices
    batches = sorted({a.batch for a, _ in acts})
    if not batches:
        return {}
    lo, hi = batches[len(batches) // 4], batches[(3 * len(batches)) // 4]
    total: dict[int, float] = defaultdict(float)
    for a, e in acts:
        if a.kind.value in MODULE_KINDS and lo <= a.batch < hi:
            total[int(e["pid"])] += float(e["dur"]) / 1e3
    return {d: t / (hi - lo) for d, t in sorted(total.items())}


def round_ratios(path: str) -> dict[str, list[dict[int, float]]]:
    """Per schedule, per round (repeat), per device: measured compute per iteration over
    the predicted (from ``attribution.csv`` beside the ``runs`` folder)."""
    pred: dict[tuple[str, int], float] = defaultdict(float)
    for r in unique_rows(path):
        if r["term"] in MODULE_KINDS:
            pred[(r["schedule"], int(r["device"]))] += float(r["predicted_ms"])
    runs = Path(path).parent / "runs"
    out: dict[str, list[dict[int, float]]] = {}
    for sched in sorted({s for s, _ in pred}):
        dirs = sorted(runs.glob(f"{sched}.r*"), key=lambda d: int(d.name.rsplit(".r", 1)[1]))
        rows = []
        for d in [runs / sched, *dirs]:
            if (d / "trace.json").exists():
                got = trace_compute(d / "trace.json")
                rows.append({dev: ms / pred[(sched, dev)] for dev, ms in got.items() if pred.get((sched, dev))})
        out[sched] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("attribution_csv")
    p.add_argument("--rounds", action="store_true", help="the ratio per repeat, from the runs' traces")
    a = p.parse_args(argv)
    if a.rounds:
        for s, rows in round_ratios(a.attribution_csv).items():
            print(f"{s:22s} " + "  ".join("/".join(f"{r[d]:.3f}" for d in sorted(r)) for r in rows))
        return 0
    for s, d, r, rv, m in ratios(a.attribution_csv):
        print(f"{s:22s} dev {d}: compute meas/pred {r:.3f}  recv-wait {rv:.1f} ms  compute {m:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
