"""Where a prediction's time goes, term by term, next to where the measured run's went.

Every device of a run is, at every instant of the steady window, either inside one
action (F, B, I, W, U, LOSS, a send's post, a receive, an all-reduce start or wait)
or between two actions (the runtime's own loop and bookkeeping, or a compute action
waiting for a core). Splitting the window that way on both sides -- the simulated
timeline and the executor's per-action rows -- gives, per device, stage and term,
the time per iteration each side spends there. The terms of one device add up to
the window, i.e. to that side's iteration time, so the per-term differences add up
to the iteration-time error of that device: the error is *attributed* to named terms
instead of being one number.

Terms: an action kind (``F`` ... ``ARW``) for the time inside actions of that kind;
``gap:<kind>`` for the time from the end of an action of that kind to the start of
the next action on the device (the simulator's ``gap_ns`` after that kind, or the
wait for a core a transfer occupies); ``idle`` for window time before a device's
first action (a device that starts late). A receive's span includes waiting for the
message: a measured ``RECV_*`` above the predicted one is late data (link delay,
stalls, an upstream stage that ran slow), not receive cost.

:func:`attribution` returns long-format rows (one per schedule, device, stage and
term: ``pandas.DataFrame(rows)`` works as is); :func:`per_device` sums them per
device into the report's groups and :func:`markdown_table` renders those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stalesim.schedule.actions import COLLECTIVE_KINDS, COMPUTE_NAMES_ORDERED, TRANSFER_NAMES_ORDERED, Kind

# the report's columns, in order: each compute kind, each transfer kind, then what lies between
KIND_ORDER = COMPUTE_NAMES_ORDERED + TRANSFER_NAMES_ORDERED
GAP_PREFIX = "gap:"
IDLE = "idle"
COLUMNS = ("schedule", "device", "stage", "term", "predicted_ms", "measured_ms", "replayed_ms",
           "measured_minus_predicted_ms", "predicted_count", "measured_count",
           "predicted_mean_us", "measured_mean_us")


@dataclass(frozen=True)
class Span:
    """One action on one device (seconds on that side's clock)."""

    device: int
    kind: str
    stage: int
    start: float
    end: float


@dataclass(frozen=True)
class Split:
    """One side's window split into terms: ``seconds[(device, stage, term)]`` inside
    ``[lo, hi]``, ``count[(device, stage, kind)]`` actions starting inside it, and
    ``iterations``: how many iterations the window holds (window / iteration time)."""

    seconds: dict[tuple[int, int, str], float]
    count: dict[tuple[int, int, str], int]
    lo: float
    hi: float
    iterations: float

    def device_total(self, device: int) -> float:
        return sum(v for (d, _s, _t), v in self.seconds.items() if d == device)


def spans_from_rows(rows_by_rank: dict[str, list[list[Any]]]) -> list[Span]:
    """The executor's per-action rows (label, kind, stage, batch, micro, worker, start, end)."""
    return [Span(int(d), str(r[1]), int(r[2]), float(r[6]), float(r[7]))
            for d, rows in rows_by_rank.items() for r in rows]


def spans_from_sim(result: Any) -> list[Span]:
    """The simulated timeline: every action's span on its device as the device is occupied
    (a send from its start to the end of its post, an all-reduce start to its issue, a
    receive or an all-reduce wait from its start to its completion)."""
    tl = result.timeline
    if tl is None:
        raise ValueError("no timeline: simulate with keep_timeline=True (the event path)")
    prog = tl.program
    return [Span(int(prog.device_of_gid[g]), a.kind.value, int(a.stage), tl.start[g] / 1e9, tl.end[g] / 1e9)
            for g, a in enumerate(prog.actions) if tl.end[g] >= 0]


def sim_window(result: Any) -> tuple[float, float]:
    """The simulator's steady window in seconds (whole run without a steady state)."""
    tl = result.timeline
    w = result.steady_window
    if w and w[1] > w[0]:
        return tl.batch_done[w[0]] / 1e9, tl.batch_done[w[1]] / 1e9
    return 0.0, tl.makespan / 1e9


def split(spans: Iterable[Span], lo: float, hi: float, iteration_s: float) -> Split:
    """Split ``[lo, hi]`` of every device into the terms of the module docstring."""
    by_dev: dict[int, list[Span]] = {}
    for s in spans:
        by_dev.setdefault(s.device, []).append(s)
    sec: dict[tuple[int, int, str], float] = {}
    cnt: dict[tuple[int, int, str], int] = {}

    def add(key: tuple[int, int, str], a: float, b: float) -> None:
        x = min(b, hi) - max(a, lo)
        if x > 0:
            sec[key] = sec.get(key, 0.0) + x

    for d, ss in by_dev.items():
        ss.sort(key=lambda s: (s.start, s.end))
        first = ss[0]
        if first.start > lo:
            add((d, first.stage, IDLE), lo, first.start)
        for i, s in enumerate(ss):
            add((d, s.stage, s.kind), s.start, s.end)
            if lo <= s.start < hi:
                cnt[(d, s.stage, s.kind)] = cnt.get((d, s.stage, s.kind), 0) + 1
            nxt = ss[i + 1].start if i + 1 < len(ss) else hi
            # overlapping spans (none in either runtime: one action at a time) add no gap
            add((d, s.stage, GAP_PREFIX + s.kind), s.end, nxt)
    its = (hi - lo) / iteration_s if iteration_s > 0 and hi > lo else 1.0
    return Split(sec, cnt, lo, hi, its)


def attribution(schedule: str, predicted: Split, measured: Split,
                replayed: Split | None = None) -> list[dict[str, Any]]:
    """Long-format rows: per device, stage and term the milliseconds per iteration on each
    side (``replayed``: the simulator with the measured costs), their difference and, for
    action terms, the actions per iteration and the mean span of one (microseconds)."""
    keys = set(predicted.seconds) | set(measured.seconds) | set(replayed.seconds if replayed else ())
    keys |= set(predicted.count) | set(measured.count)

    def per_it(sp: Split | None, k: tuple[int, int, str]) -> float | None:
        if sp is None:
            return None
        return 1e3 * sp.seconds.get(k, 0.0) / sp.iterations

    def count(sp: Split, k: tuple[int, int, str]) -> float | None:
        return sp.count[k] / sp.iterations if k in sp.count else None

    def mean_us(sp: Split, k: tuple[int, int, str]) -> float | None:
        n = sp.count.get(k)
        return 1e6 * sp.seconds.get(k, 0.0) / n if n else None

    rows = []
    for k in sorted(keys, key=lambda k: (k[0], k[1], term_rank(k[2]))):
        p, m = per_it(predicted, k), per_it(measured, k)
        rows.append({"schedule": schedule, "device": k[0], "stage": k[1], "term": k[2],
                     "predicted_ms": p, "measured_ms": m, "replayed_ms": per_it(replayed, k),
                     "measured_minus_predicted_ms": (m or 0.0) - (p or 0.0),
                     "predicted_count": count(predicted, k), "measured_count": count(measured, k),
                     "predicted_mean_us": mean_us(predicted, k), "measured_mean_us": mean_us(measured, k)})
    return rows


def term_rank(term: str) -> tuple[int, int]:
    """Sort order: action kinds in :data:`KIND_ORDER`, then their gaps, then ``idle``."""
    if term == IDLE:
        return (2, 0)
    gap = term.startswith(GAP_PREFIX)
    kind = term[len(GAP_PREFIX):] if gap else term
    return (1 if gap else 0, KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER))


def group_of(term: str) -> str:
    """The report's column of a term: its kind, ``SEND``/``RECV`` for either direction,
    ``AR`` for the all-reduce start and wait, ``gaps`` for every gap, ``idle``."""
    if term.startswith(GAP_PREFIX):
        return "gaps"
    return _GROUP.get(term, term)


GROUPS = COMPUTE_NAMES_ORDERED + ("SEND", "RECV", "AR", "gaps", IDLE)
# a transfer kind -> its group: both directions of a send, of a receive; the collective
_GROUP = {Kind.SEND_F.value: "SEND", Kind.SEND_B.value: "SEND", Kind.RECV_F.value: "RECV",
          Kind.RECV_B.value: "RECV", **{k.value: "AR" for k in COLLECTIVE_KINDS}}


def per_device(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows summed over stages and into the report's groups, one per (schedule, device):
    ``{group: measured - predicted ms per iteration}`` plus both totals."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["schedule"], int(r["device"]))
        o = out.setdefault(key, {"schedule": key[0], "device": key[1], "predicted_ms": 0.0,
                                 "measured_ms": 0.0, **{g: 0.0 for g in GROUPS}})
        o[group_of(r["term"])] += r["measured_minus_predicted_ms"]
        o["predicted_ms"] += r["predicted_ms"] or 0.0
        o["measured_ms"] += r["measured_ms"] or 0.0
    return [out[k] for k in sorted(out)]


def markdown_table(devices: Sequence[dict[str, Any]]) -> list[str]:
    """The report's table from :func:`per_device`'s rows: per schedule and device, measured -
    predicted milliseconds per iteration in each group that is not zero everywhere; the
    groups add up to the device's total difference."""
    used = [g for g in GROUPS if any(abs(o.get(g) or 0.0) >= 0.005 for o in devices)]
    head = ["schedule", "dev", "pred ms", "meas ms", *used, "total", "largest"]
    L = ["| " + " | ".join(head) + " |",
         "| --- | ---: | " + " | ".join("---:" for _ in head[2:-1]) + " | --- |"]
    for o in devices:
        big = largest(o)
        cells = [o["schedule"], str(o["device"]), f"{o['predicted_ms']:.2f}", f"{o['measured_ms']:.2f}",
                 *(f"{o.get(g) or 0.0:+.2f}" for g in used), f"{o['measured_ms'] - o['predicted_ms']:+.2f}",
                 f"{big[0]} {big[1]:+.2f}" if big else ""]
        L.append("| " + " | ".join(cells) + " |")
    return L


def largest(device_row: dict[str, Any]) -> tuple[str, float] | None:
    """The group of one :func:`per_device` row with the largest |measured - predicted|."""
    vals = [(g, float(device_row.get(g) or 0.0)) for g in GROUPS]
    g, v = max(vals, key=lambda x: abs(x[1]))
    return (g, v) if v != 0.0 else None


# the goals a term can carry: a time goal compares measurement with the prediction, a replay goal
# with the replay (the simulator run with the measured costs); median goals look at every
# schedule, max goals at the one schedule that sets the max
GOAL_SIDES = {"median_abs_time_error": ("predicted_ms", "time_error"),
              "max_abs_time_error": ("predicted_ms", "time_error"),
              "median_abs_replay_error": ("replayed_ms", "replay_time_error"),
              "max_abs_replay_error": ("replayed_ms", "replay_time_error")}


def goal_terms(rows: Sequence[dict[str, Any]], schedule_rows: Sequence[dict[str, Any]],
               met: dict[str, bool | None]) -> dict[str, dict[str, Any]]:
    """For each missed time or replay goal, the term group that carries most of it, with its size.

    ``rows``: :func:`attribution`'s rows of every schedule; ``schedule_rows``: the per-schedule
    results (``schedule``, ``time_error``, ``replay_time_error``); ``met``: goal -> met?. A max
    goal is set by one schedule, whose largest group is named. A median goal is every
    schedule's: each group's difference is signed toward its schedule's error (a term that
    makes an optimistic schedule slower counts toward that schedule's |error|) and averaged
    over the schedules, so terms that cancel between schedules do not look responsible.

    Each entry: ``term`` (a group of :data:`GROUPS`), ``schedule`` (max goals) or
    ``schedules`` (how many), ``toward_error_ms`` (ms per iteration, mean over devices and
    schedules, signed toward |error|), ``of_iteration`` (that over the mean iteration time of
    the side it is compared with), ``side_ms`` / ``measured_ms`` (the term's own ms per
    iteration on both sides, summed over devices, mean over schedules) and ``term_error``
    (measured / side - 1, None when the side has none of it), ``against`` (``predicted`` or
    ``replayed``). Goals met, not measured, or without rows are left out.
    """
    attributed = {a["schedule"] for a in rows}
    out: dict[str, dict[str, Any]] = {}
    for goal, (side, err_key) in GOAL_SIDES.items():
        if met.get(goal) is not False:
            continue
        errs: dict[str, float] = {r["schedule"]: float(r[err_key]) for r in schedule_rows
                                  if isinstance(r.get(err_key), (int, float)) and r["schedule"] in attributed}
        if not errs:
            continue
        if goal.startswith("max_"):
            worst = max(errs, key=lambda s: abs(errs[s]))
            errs = {worst: errs[worst]}
        entry = _largest_toward(rows, errs, side)
        if entry is None:
            continue
        if len(errs) == 1:
            entry["schedule"] = next(iter(errs))
        else:
            entry["schedules"] = len(errs)
        entry["against"] = side.removesuffix("_ms")
        out[goal] = entry
    return out


def _largest_toward(rows: Sequence[dict[str, Any]], errs: dict[str, float],
                    side: str) -> dict[str, Any] | None:
    """:func:`goal_terms`' arithmetic over the schedules of ``errs`` (schedule -> signed error)."""
    toward = {g: 0.0 for g in GROUPS}
    own = {g: [0.0, 0.0] for g in GROUPS}  # side, measured: ms per iteration summed over devices
    iteration = 0.0
    for s, e in errs.items():
        rs = [r for r in rows if r["schedule"] == s]
        n_dev = len({int(r["device"]) for r in rs}) or 1
        # an error is side / measured - 1: a term measured above its side pushes it negative
        sign = -1.0 if e >= 0 else 1.0
        for r in rs:
            g = group_of(r["term"])
            a, m = r.get(side) or 0.0, r.get("measured_ms") or 0.0
            toward[g] += sign * (m - a) / n_dev
            own[g][0] += a
            own[g][1] += m
            iteration += a / n_dev
    k = len(errs)
    g, v = max(toward.items(), key=lambda x: abs(x[1]))
    if v == 0.0:
        return None
    a, m = own[g][0] / k, own[g][1] / k
    return {"term": g, "toward_error_ms": v / k, "of_iteration": (v / iteration) if iteration > 0 else None,
            "side_ms": a, "measured_ms": m, "term_error": (m / a - 1.0) if a > 0 else None}


def goal_term_line(goal: str, entry: dict[str, Any]) -> str:
    """One sentence naming a missed goal's term and its measured size (the report, the CLI)."""
    where = (f"in `{entry['schedule']}`" if "schedule" in entry
             else f"mean over {entry['schedules']} schedules")
    size = f"{entry['toward_error_ms']:+.2f} ms per iteration toward the error ({where}"
    if entry.get("of_iteration") is not None:
        size += f", {entry['of_iteration']:+.1%} of the iteration"
    size += ")"
    te = entry.get("term_error")
    own = (f"; the term took {entry['measured_ms']:.2f} ms per iteration over all devices, "
           f"{entry['side_ms']:.2f} {entry['against']}" + (f" ({te:+.1%})" if te is not None else ""))
    return f"{goal}: {entry['term']} {size}{own}"
