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
  = time in compute actions (F, LOSS, B, I, W, U); sends, receive waits and
  all-reduce waits count as idle;
- the Chrome trace names each slice with the IR text of its action without the
  version (``1F3``, ``0RECV_B2.1``), the labels the simulator's trace uses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast

from stalesim.schedule.actions import COMPUTE_KIND_NAMES as COMPUTE  # I and W (split backward) too

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from stalesim.schedule import Action

#: One measured action: ``[label, kind, stage, batch, micro, worker, start_s, end_s]``. A list
#: of mixed types (str, int, None, float) because that is what is pickled to rank 0 and kept
#: in the summary's JSON ``rows``; a tuple type would misstate it, so its items stay ``Any``.
Row = list[Any]
#: What :meth:`Recorder.begin` returns: a ``perf_counter`` value, or a recorded CUDA event.
Start: TypeAlias = "float | torch.cuda.Event"


def label_of(action: Action) -> str:
    """IR text of an action without its version annotation (trace label)."""
    return str(action.with_version(None)) if action.version is not None else str(action)


@dataclass
class Recorder:
    """Collects (label, kind, stage, batch, micro, worker, start, end) per action.

    In the loop it stores only (index into the action list, start, end): the row
    with the action's fields and trace label is built once, in :meth:`finish`.
    """

    device: torch.device | None = None  # CUDA -> events
    cuda: bool = False
    actions: list[Action] = field(default_factory=list)  # the rank's action list
    texts: list[str] | None = None  # their trace labels (label_of), if already computed
    t0: float = 0.0
    rows: list[Row] = field(default_factory=list)
    _raw: list[tuple[int, float, float]] = field(default_factory=list)
    _events: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)
    _ref: torch.cuda.Event | None = None

    def start_clock(self, t0: float | None = None) -> None:
        """Start the run's clock; ``t0``: a ``perf_counter`` value to measure from instead
        of now (ranks on one host share ``CLOCK_MONOTONIC``, so a common origin makes their
        rows comparable to the microsecond, not just to the barrier's skew)."""
        if self.cuda:
            import torch

            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
        now = time.perf_counter()
        self.t0 = now if t0 is None else min(now, t0)

    def begin(self) -> Start:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def end(self, index: int, start: Start) -> None:
        """Action ``index`` of the list ran from ``start`` (what :meth:`begin` returned) to now."""
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append((index, cast("torch.cuda.Event", start), ev))  # begin's, on CUDA
        else:
            now = time.perf_counter()  # first: the cast below stays outside the measured time
            self._raw.append((index, cast(float, start), now))  # begin's, on the CPU

    def _meta(self, index: int) -> Row:
        a = self.actions[index]
        text = self.texts[index] if self.texts is not None else label_of(a)
        return [text, a.kind.value, a.stage, a.batch, a.micro, a.worker]

    def finish(self) -> list[Row]:
        """Resolve CUDA events (one synchronize) and return all rows, in execution order."""
        if self.cuda and self._events:
            import torch

            torch.cuda.synchronize()
            assert self._ref is not None  # recorded by start_clock
            for i, ev_s, ev_e in self._events:
                self.rows.append(self._meta(i) + [self._ref.elapsed_time(ev_s) / 1e3,
                                                  self._ref.elapsed_time(ev_e) / 1e3])
            self._events.clear()
        t0 = self.t0
        for i, s, e in self._raw:
            self.rows.append(self._meta(i) + [s - t0, e - t0])
        self._raw.clear()
        return self.rows


class Timing(TypedDict):
    """What :func:`summarize` measured (rank 0 copies most of it into the run's summary)."""

    iteration_time_s: float
    throughput_samples_per_s: float
    utilization: dict[str, float]  # per device: busy / wall over the timing window
    utilization_whole_run: dict[str, float]  # per device: busy / wall of the whole run
    time_by_kind_s: dict[str, dict[str, float]]  # per device, per action kind
    wall_s: float
    warmup_batches_skipped: int
    timing_window: str  # the rule: "steady window", "whole run" or "warm-up"
    timing_window_s: list[float]  # [lo, hi]
    batch_completion_s: list[float | None]  # per batch (None: not run here)


def completions(rows_by_rank: dict[int, list[Row]], batches: int) -> list[float | None]:
    """End of the last U of each batch (None for batches not run here, e.g. before a resume)."""
    done: list[float | None] = [None] * batches
    for rows in rows_by_rank.values():
        for _label, kind, _stage, batch, _micro, _worker, _s, e in rows:
            if kind == "U" and (done[batch] is None or e > done[batch]):
                done[batch] = e
    return done


def warmup_batches(batches: int, stages: int) -> int:
    """Batches skipped before timing: the pipeline fill plus a little cache warm-up."""
    if batches <= 2:
        return 0
    return min(batches - 2, max(1, batches // 10, stages - 1))


def summarize(rows_by_rank: dict[int, list[Row]], *, batches: int, stages: int,
              samples_per_batch: int, window: tuple[int, int] | None = None,
              whole_run: bool = False) -> Timing:
    """Iteration time, utilization and time per kind from every rank's rows.

    ``window`` = (k0, k1), the schedule's steady window (``Schedule.steady_window()``):
    the iteration time is (completion of k1 - completion of k0) / (k1 - k0), the
    definition the simulator uses, so ``run`` and ``simulate`` report the same
    quantity. ``whole_run`` (a schedule without a steady state, e.g. the hybrid
    switch): whole run / batches, as the simulator does. Without either (or when
    the window's batches did not run here, e.g. before a resume) the warm-up rule
    :func:`warmup_batches` applies.
    """
    done = completions(rows_by_rank, batches)
    known = {t: x for t, x in enumerate(done) if x is not None}  # the batches that ran here
    present = list(known)
    skip = warmup_batches(len(present), stages)
    wall = max((r[7] for rows in rows_by_rank.values() for r in rows), default=0.0)
    it = 0.0
    lo, hi = 0.0, wall
    rule = "warm-up"
    # the window's bounding batches, when it is a window (k1 > k0) and both ran here
    k0, k1 = window if window is not None else (0, 0)
    w_lo = done[k0] if k1 > k0 else None
    w_hi = done[k1] if w_lo is not None else None
    if w_lo is not None and w_hi is not None and w_hi > w_lo:
        lo, hi = w_lo, w_hi
        it = (hi - lo) / (k1 - k0)
        skip, rule = k0, "steady window"
    elif whole_run and len(present) == batches and batches > 0:
        it, skip, rule = wall / batches, 0, "whole run"
    elif len(present) >= 2:
        a, b = present[skip], present[-1]
        lo, hi = known[a], known[b]
        it = (hi - lo) / (b - a) if b > a and hi > lo else 0.0
    elif present:
        it = known[present[0]] or 0.0
    if hi <= lo:
        lo, hi = 0.0, wall
    util: dict[str, float] = {}
    util_total: dict[str, float] = {}
    busy_by_kind: dict[str, dict[str, float]] = {}
    for d, rows in sorted(rows_by_rank.items()):
        busy = busy_all = 0.0
        kinds: dict[str, float] = {}
        for _label, kind, _stage, _batch, _micro, _worker, s, e in rows:
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
        "timing_window": rule,
        "timing_window_s": [lo, hi],
        "batch_completion_s": done,
    }
