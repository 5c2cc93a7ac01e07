"""Chrome-trace (Perfetto) writer shared by the simulator and the executor.

Both consumers describe a run as a list of :class:`TraceEvent` (one slice per
action: label = the IR text without the version suffix, e.g. ``1F3``,
``0SEND_F3.2``, ``w1:0AR5``) plus :class:`Flow` arrows from each send to its
receive. Same labels, same tracks (``pid`` = device, ``tid`` = ``"compute"``
or ``"comm"``), so a simulated and a measured trace line up in Perfetto.

Format (Trace Event Format, JSON object form)::

    {"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "device 0"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": "compute", "args": {"name": "compute"}},
        {"name": "1F3", "ph": "X", "ts": 12.0, "dur": 3.5, "pid": 1, "tid": "compute", "cat": "F"},
        {"name": "0SEND_F3", "ph": "s", "id": 7, "ts": ..., "pid": 0, "tid": "comm", "cat": "flow"},
        {"name": "0SEND_F3", "ph": "f", "id": 7, "ts": ..., "pid": 1, "tid": "comm", "cat": "flow", "bp": "e"}],
     "displayTimeUnit": "ms", "otherData": {...}}

Times are microseconds (floats), as the format requires.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Flow",
    "TraceEvent",
    "action_label",
    "check_chrome_trace",
    "chrome_trace",
    "write_chrome_trace",
]

TRACKS = ("compute", "comm")


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One slice: ``ts_us``/``dur_us`` in microseconds, ``pid`` the device."""

    name: str
    ts_us: float
    dur_us: float
    pid: int
    tid: str = "compute"
    cat: str = ""
    args: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    """An arrow from (pid, tid, ts) of a send to (pid, tid, ts) of its receive."""

    id: int
    name: str
    src_pid: int
    src_ts_us: float
    dst_pid: int
    dst_ts_us: float
    src_tid: str = "comm"
    dst_tid: str = "comm"


def action_label(action: Any) -> str:
    """IR text of an action without its version suffix (``1F3``, ``0B2.1``, ``w1:0AR5``)."""
    text = f"{action.stage}{action.kind.value}{action.batch}"
    if action.micro is not None:
        text += f".{action.micro}"
    if action.worker:
        text = f"w{action.worker}:{text}"
    return text


def chrome_trace(
    events: Sequence[TraceEvent],
    flows: Iterable[Flow] = (),
    *,
    process_names: Mapping[int, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chrome-trace JSON object for these events and flows.

    Every pid gets ``process_name`` metadata (``process_names`` or "device N"),
    every (pid, tid) ``thread_name`` metadata and a sort index that puts
    ``compute`` above ``comm``.
    """
    out: list[dict[str, Any]] = []
    pids = sorted({e.pid for e in events} | set(process_names or {}))
    tracks = sorted({(e.pid, e.tid) for e in events})
    names = dict(process_names or {})
    for pid in pids:
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": "compute",
                    "args": {"name": names.get(pid, f"device {pid}")}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": "compute",
                    "args": {"sort_index": pid}})
    for pid, tid in tracks:
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tid}})
        order = TRACKS.index(tid) if tid in TRACKS else len(TRACKS)
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": order}})
    for e in events:
        ev: dict[str, Any] = {"name": e.name, "ph": "X", "ts": e.ts_us, "dur": e.dur_us,
                              "pid": e.pid, "tid": e.tid}
        if e.cat:
            ev["cat"] = e.cat
        if e.args:
            ev["args"] = dict(e.args)
        out.append(ev)
    for f in flows:
        out.append({"name": f.name, "cat": "flow", "ph": "s", "id": f.id, "ts": f.src_ts_us,
                    "pid": f.src_pid, "tid": f.src_tid})
        out.append({"name": f.name, "cat": "flow", "ph": "f", "bp": "e", "id": f.id,
                    "ts": f.dst_ts_us, "pid": f.dst_pid, "tid": f.dst_tid})
    trace: dict[str, Any] = {"traceEvents": out, "displayTimeUnit": "ms"}
    if metadata:
        trace["otherData"] = dict(metadata)
    return trace


def write_chrome_trace(
    path: str | os.PathLike[str],
    events: Sequence[TraceEvent] | Mapping[str, Any],
    flows: Iterable[Flow] = (),
    **kwargs: Any,
) -> Path:
    """Write a trace atomically (tmp file + rename). ``events`` may be a ready trace dict."""
    trace = events if isinstance(events, Mapping) else chrome_trace(events, flows, **kwargs)
    from stalesim.atomic import write_json_atomic

    return write_json_atomic(path, trace, compact=True)


def check_chrome_trace(trace: Mapping[str, Any]) -> list[str]:
    """Problems with a trace object (empty list = valid): keys, phases, paired flows."""
    problems: list[str] = []
    evs = trace.get("traceEvents")
    if not isinstance(evs, list):
        return ["traceEvents: missing or not a list"]
    starts: dict[Any, int] = {}
    finishes: dict[Any, int] = {}
    for i, e in enumerate(evs):
        ph = e.get("ph")
        need = {"X": ("name", "ts", "dur", "pid", "tid"), "M": ("name", "pid", "args"),
                "s": ("name", "id", "ts", "pid", "tid"), "f": ("name", "id", "ts", "pid", "tid")}
        if ph not in need:
            problems.append(f"traceEvents[{i}].ph: unexpected {ph!r}")
            continue
        for k in need[ph]:
            if k not in e:
                problems.append(f"traceEvents[{i}].{k}: missing")
        if ph == "X" and (e.get("dur", 0) < 0 or e.get("ts", 0) < 0):
            problems.append(f"traceEvents[{i}]: negative ts or dur")
        if ph == "s":
            starts[e["id"]] = starts.get(e["id"], 0) + 1
        elif ph == "f":
            finishes[e["id"]] = finishes.get(e["id"], 0) + 1
    if starts != finishes or any(v != 1 for v in starts.values()):
        problems.append("flows: every id needs exactly one 's' and one 'f'")
    return problems
