"""Per schedule and device: the runs' compute over the predicted compute, beside the time
the device spent in receives.

Reads a validate folder's ``attribution.csv`` (``benchmarks/attribute_validate.py``) and sums
F, B, I and W per (schedule, device), measured and predicted ms per iteration of the median
repeat, and the measured receive time. A ratio that rises with the receive time is the
after-wait term (docs/validate.md); one that differs between devices of one schedule points
at the cores the ranks ran on.

    python -m benchmarks.bench_compute_over_predicted runs/val/attribution.csv
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict

from stalesim.validate.stagetime import MODULE_KINDS


def ratios(path: str) -> list[tuple[str, str, float, float, float]]:
    """``(schedule, device, measured / predicted compute, receive ms, compute ms)`` rows."""
    comp: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    recv: dict[tuple[str, str], float] = defaultdict(float)
    seen: set[tuple[str, ...]] = set()
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            key = (r["schedule"], r["device"], r["stage"], r["term"])
            if key in seen:  # the file repeats rows per stage listing
                continue
            seen.add(key)
            dev = (r["schedule"], r["device"])
            if r["term"] in MODULE_KINDS:
                comp[dev][0] += float(r["predicted_ms"])
                comp[dev][1] += float(r["measured_ms"])
            elif r["term"].startswith("RECV"):
                recv[dev] += float(r["measured_ms"])
    return [(s, d, m / p if p else float("nan"), recv[(s, d)], m) for (s, d), (p, m) in sorted(comp.items())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("attribution_csv")
    a = p.parse_args(argv)
    for s, d, r, rv, m in ratios(a.attribution_csv):
        print(f"{s:22s} dev {d}: compute meas/pred {r:.3f}  recv-wait {rv:.1f} ms  compute {m:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
