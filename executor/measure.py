"""Per-action timing and the run summary computed from it.

Each rank records (start, end) for every action it runs: ``perf_counter`` on
CPU, CUDA events on GPU (resolved once at the end, so timing adds no
synchronisation). Times are seconds since a barrier all ranks leave together,
so on one node the ranks' timelines share an origin (across nodes they agree to
within the barrier's skew).

Summary (rank 0, from all ranks' events):

- batch t *completes* when the last ``U`` of batch t ends (over all ranks);
- ``iteration_time_s``: mean time between completions after skipping the
  warm-up batches (steady state);
- ``utilization[d]``: busy / wall of device d over the same steady window, busy
  = time in compute actions (F, LOSS, B, U); sends, receive waits and
  all-reduce waits count as idle;
- the Chrome trace names each slice with the IR text of its action without the
  version (``1F3``, ``0RECV_B2.1``), the labels the simulator's trace uses.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

COMPUTE = ("F", "B", "U", "LOSS")


def label_of(action: Any) -> str:
    """IR text of an action without its version annotation (trace label)."""
    return str(action.with_version(None)) if action.version is not None else str(action)


@dataclass
class Recorder:
    """Collects (label, kind, stage, batch, micro, worker, start, end) per action."""

    device: Any = None  # torch.device; CUDA -> events
    cuda: bool = False
    t0: float = 0.0
    rows: list[list[Any]] = field(default_factory=list)
    _events: list[Any] = field(default_factory=list)
    _ref: Any = None

    def start_clock(self) -> None:
        if self.cuda:
            import torch

            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
        self.t0 = time.perf_counter()

    def begin(self) -> Any:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def end(self, action: Any, start: Any) -> None:
        a = action
        meta = [label_of(a), a.kind.value, a.stage, a.batch, a.micro, a.worker]
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append((meta, start, ev))
        else:
            self.rows.append(meta + [start - self.t0, time.perf_counter() - self.t0])

    def finish(self) -> list[list[Any]]:
        """Resolve CUDA events (one synchronize) and return all rows."""
        if self.cuda and self._events:
            import torch

            torch.cuda.synchronize()
            for meta, s, e in self._events:
                self.rows.append(meta + [self._ref.elapsed_time(s) / 1e3, self._ref.elapsed_time(e) / 1e3])
            self._events.clear()
        return self.rows


def completions(rows_by_rank: dict[int, list[list[Any]]], batches: int) -> list[float | None]:
    """End of the last U of each batch (None for batches not run here, e.g. before a resume)."""
    done: list[float | None] = [None] * batches
    for rows in rows_by_rank.values():
        for label, kind, stage, batch, micro, worker, s, e in rows:
            if kind == "U" and (done[batch] is None or e > done[batch]):
                done[batch] = e
    return done


def warmup_batches(batches: int, stages: int) -> int:
    """Batches skipped before timing: the pipeline fill plus a little cache warm-up."""
    if batches <= 2:
        return 0
    return min(batches - 2, max(1, batches // 10, stages - 1))


def summarize(rows_by_rank: dict[int, list[list[Any]]], *, batches: int, stages: int,
              samples_per_batch: int) -> dict[str, Any]:
    done = completions(rows_by_rank, batches)
    present = [t for t in range(batches) if done[t] is not None]
    skip = warmup_batches(len(present), stages)
    wall = max((r[7] for rows in rows_by_rank.values() for r in rows), default=0.0)
    it = 0.0
    lo, hi = 0.0, wall
    if len(present) >= 2:
        a, b = present[skip], present[-1]
        lo, hi = done[a], done[b]  # type: ignore[assignment]
        it = (hi - lo) / (b - a) if b > a and hi > lo else 0.0
    elif present:
        it = done[present[0]] or 0.0  # type: ignore[assignment]
    if hi <= lo:
        lo, hi = 0.0, wall
    util: dict[str, float] = {}
    util_total: dict[str, float] = {}
    busy_by_kind: dict[str, dict[str, float]] = {}
    for d, rows in sorted(rows_by_rank.items()):
        busy = busy_all = 0.0
        kinds: dict[str, float] = {}
        for label, kind, stage, batch, micro, worker, s, e in rows:
            kinds[kind] = kinds.get(kind, 0.0) + (e - s)
            if kind in COMPUTE:
                busy_all += e - s
                busy += max(0.0, min(e, hi) - max(s, lo))
        util[str(d)] = busy / (hi - lo) if hi > lo else 0.0
        util_total[str(d)] = busy_all / wall if wall > 0 else 0.0
        busy_by_kind[str(d)] = {k: round(v, 6) for k, v in sorted(kinds.items())}
    return {
        "iteration_time_s": it,
        "throughput_samples_per_s": samples_per_batch / it if it > 0 else 0.0,
        "utilization": util,
        "utilization_whole_run": util_total,
        "time_by_kind_s": busy_by_kind,
        "wall_s": wall,
        "warmup_batches_skipped": skip,
        "batch_completion_s": done,
    }


def chrome_trace(rows_by_rank: dict[int, list[list[Any]]], *, name: str = "executor") -> dict[str, Any]:
    """Chrome trace (Perfetto) with one track per device, labels = IR text without version."""
    events: list[dict[str, Any]] = []
    for d in sorted(rows_by_rank):
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0,
                       "args": {"name": f"device {d}"}})
        for label, kind, stage, batch, micro, worker, s, e in rows_by_rank[d]:
            events.append({
                "ph": "X", "name": label, "cat": kind, "pid": d, "tid": 0,
                "ts": round(s * 1e6, 3), "dur": round(max(0.0, e - s) * 1e6, 3),
                "args": {"stage": stage, "batch": batch, "micro": micro, "worker": worker},
            })
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": name}}


def write_trace(path: str, trace: dict[str, Any]) -> None:
    from stalesim.atomic import write_json_atomic

    write_json_atomic(path, trace, compact=True)
