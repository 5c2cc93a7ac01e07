"""Where a rank's time goes, from the executor's per-action rows: what the replay can miss.

The replay (:func:`stalesim.validate.costmodel.replay_costs`) feeds the simulator
the measured durations of the compute actions. Whatever else a rank spends time
on is invisible to it unless the cost model has a term for it. This module splits
each rank's steady window into:

* ``compute``: F/B/U/LOSS spans (what the replay uses);
* ``comm``: the spans of SEND_* (posting), RECV_* and ARW (waiting, then
  completing), AR (packing and starting) by kind;
* ``gap``: time between two recorded actions (the executor loop itself:
  bookkeeping, the beacon, timestamps, memory sampling, Python), attributed to
  the kind of the action that *follows* it.

and reports per kind the number of actions and the median and low quantile of
their spans: the low quantile of a receive is its CPU cost when the message is
already there (no waiting), the median of a send its posting cost. These are
the quantities the per-action costs of :class:`stalesim.sim.model.StageCosts`
(``action_ns``, ``gap_ns``) and ``SimHardware.wake_ns`` are calibrated against.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from stalesim.schedule.actions import COMPUTE_KINDS

# the schedule IR's compute kinds (F, B, the split backward's I and W, U, LOSS), by name
COMPUTE = tuple(sorted(k.value for k in COMPUTE_KINDS))
Rows = dict[str, list[list[Any]]]


def rows_from_trace(path: str | Path) -> Rows:
    """An executor run's ``trace.json`` back into per-rank rows (label, kind, stage, batch,
    micro, worker, start_s, end_s); stage/batch/micro/worker are parsed from the label."""
    from stalesim.schedule import Action

    data = json.loads(Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    out: Rows = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        a = Action.parse(e["name"])
        s0 = e["ts"] / 1e6
        out.setdefault(str(e["pid"]), []).append(
            [e["name"], a.kind.value, a.stage, a.batch, a.micro, a.worker, s0, s0 + e["dur"] / 1e6])
    for rows in out.values():
        rows.sort(key=lambda r: r[6])
    return out


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return 0.0
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def breakdown(rows_by_rank: Rows, window_s: tuple[float, float] | None = None) -> dict[str, Any]:
    """Per rank: wall, compute, comm and gap seconds in the window, and per kind statistics.

    ``per_kind[kind]``: ``n``, ``span_median_s``, ``span_p10_s`` (low quantile), ``gap_median_s``
    (the loop's time before actions of that kind), ``span_total_s``, ``gap_total_s``.
    """
    out: dict[str, Any] = {}
    for d in sorted(rows_by_rank, key=int):
        rows = sorted(rows_by_rank[d], key=lambda r: r[6])
        if window_s is not None:
            lo, hi = window_s
            rows = [r for r in rows if r[6] >= lo and r[7] <= hi]
        if not rows:
            continue
        lo, hi = (window_s if window_s is not None else (rows[0][6], rows[-1][7]))
        spans: dict[str, list[float]] = defaultdict(list)
        gaps: dict[str, list[float]] = defaultdict(list)
        prev_end = None
        for r in rows:
            k = r[1]
            spans[k].append(max(0.0, r[7] - r[6]))
            if prev_end is not None:
                gaps[k].append(max(0.0, r[6] - prev_end))
            prev_end = r[7]
        per_kind = {k: {"n": len(v), "span_median_s": statistics.median(v), "span_p10_s": _q(v, 0.1),
                        "span_total_s": sum(v),
                        "gap_median_s": statistics.median(gaps[k]) if gaps[k] else 0.0,
                        "gap_total_s": sum(gaps[k])}
                    for k, v in sorted(spans.items())}
        compute = sum(sum(v) for k, v in spans.items() if k in COMPUTE)
        comm = sum(sum(v) for k, v in spans.items() if k not in COMPUTE)
        gap = sum(sum(v) for v in gaps.values())
        out[d] = {"wall_s": hi - lo, "compute_s": compute, "comm_s": comm, "gap_s": gap,
                  "actions": len(rows), "per_kind": per_kind}
    return out


def format_breakdown(b: dict[str, Any], iterations: float | None = None) -> str:
    """A compact text table: per rank and kind, count, span median / p10 and gap median (us)."""
    lines = []
    for d, r in b.items():
        per = f" per iteration over {iterations:g}" if iterations else ""
        scale = 1e3 / iterations if iterations else 1e3
        lines.append(f"rank {d}: wall {r['wall_s'] * scale:.2f} ms{per}: compute {r['compute_s'] * scale:.2f}, "
                     f"comm {r['comm_s'] * scale:.2f}, gaps {r['gap_s'] * scale:.2f} ms ({r['actions']} actions)")
        for k, s in r["per_kind"].items():
            lines.append(f"  {k:7s} n={s['n']:4d} span med {s['span_median_s'] * 1e6:8.1f} us "
                         f"p10 {s['span_p10_s'] * 1e6:8.1f} us  gap before med {s['gap_median_s'] * 1e6:7.1f} us")
    return "\n".join(lines)
