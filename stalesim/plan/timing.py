"""Iteration time and memory per device of each candidate on the target (the simulator).

A candidate's run is at most two phases, each at its own speed: a synchronous warm-up
(``warmup`` K: the first K batches run as the schedule's staleness-free counterpart,
``ScheduleSpec.warmup_with``) then the schedule proper; or a hybrid switch (``switch`` K:
K batches stale-pipelined, then the schedule it switches to, ``ScheduleSpec.switch_to``).
Each phase is simulated on its own in its steady state, and

    time(n) = fill_and_drain + min(n, K) x t_first + max(n - K, 0) x t_second

(``fill_and_drain``: the makespan of the schedule proper beyond its steady iterations,
paid once). A test checks this against the simulator's own phased run
(``simulate --warmup``) over n batches. Memory: the largest peak of either phase, per
device (a warm-up keeps less in flight than the pipeline after it, a hybrid more before
its switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.plan.candidates import Candidate
from stalesim.schedule import ScheduleConfig, get_spec

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.cost.calibration import MachineCalibration


def optimizer_state_factor(cand: Candidate) -> float:
    """Optimizer state per parameter byte of ``cand``'s run: the runtime's own rule
    (:func:`stalesim.runtime.optim.state_copies`: SGD momentum one buffer, Adam/AdamW two,
    Muon two as the whole-model bound, error feedback one more)."""
    from types import SimpleNamespace

    from stalesim.plan.candidates import mitigation_fields
    from stalesim.runtime.optim import state_copies

    ef = bool(mitigation_fields(cand.mitigation).get("error_feedback"))
    return float(state_copies(SimpleNamespace(optimizer=cand.optimizer, momentum=0.9, error_feedback=ef)))


@dataclass(frozen=True)
class Timing:
    """Predicted cost of a candidate's run on the target."""

    first_batches: int  # K: batches of the first phase (0: one phase)
    first_s: float  # seconds per iteration in the first phase
    steady_s: float  # seconds per iteration of the phase that runs to the end
    overhead_s: float  # fill and drain, once
    peak_memory_bytes: tuple[int, ...]  # per device
    cost_source: str = "given"
    warnings: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)

    def time_for(self, n: float) -> float:
        """Seconds to run ``n`` iterations (see the module doc)."""
        k = min(max(n, 0.0), float(self.first_batches))
        return self.overhead_s + k * self.first_s + max(n - self.first_batches, 0.0) * self.steady_s

    @property
    def peak_bytes(self) -> int:
        return max(self.peak_memory_bytes) if self.peak_memory_bytes else 0

    def to_dict(self) -> dict[str, Any]:
        return {"first_batches": self.first_batches, "first_iteration_s": self.first_s,
                "iteration_s": self.steady_s, "fill_drain_s": self.overhead_s,
                "peak_memory_bytes": list(self.peak_memory_bytes), "cost_source": self.cost_source,
                "warnings": list(self.warnings), **self.detail}


def _counterpart(name: str, cand: Candidate) -> ScheduleConfig:
    """Schedule ``name`` in ``cand``'s shape (micro-batches and workers where it takes them)."""
    spec = get_spec(name)
    return ScheduleConfig(name, stages=cand.stages, microbatches=cand.microbatches if spec.uses_micro else 1,
                          workers=cand.workers if spec.data_parallel else 1,
                          stages_per_device=cand.stages_per_device)


def _phases(cand: Candidate) -> tuple[ScheduleConfig, ScheduleConfig | None, int]:
    """(phase that runs to the end, first phase or None, K) as IR configs without phases of
    their own."""
    spec = get_spec(cand.schedule)
    proper = cand.schedule_config(warmup=0)
    if cand.switch is not None and spec.switch_to is not None and cand.switch > 0:
        # before the switch: the schedule proper to the end of its own run (switch = every
        # batch, set in time_candidate); after it, to the end: what it switches to
        return _counterpart(spec.switch_to, cand), replace(proper, switch=1 << 30), cand.switch
    if cand.warmup and spec.warmup_with is not None:
        return proper, _counterpart(spec.warmup_with, cand), cand.warmup
    return proper, None, 0


def time_candidate(cand: Candidate, profile: Any, hw: Any, *, batch_size: int, method: str = "event",
                   extra_options: dict[str, Any] | None = None,
                   calibration: MachineCalibration | None = None) -> Timing:
    """Simulate ``cand`` on ``hw`` with ``profile``'s costs and ``calibration``'s terms (the
    one predictor, :func:`stalesim.cost.apply.predict`; see the module doc)."""
    from stalesim.cost.apply import predict
    from stalesim.sim import SimOptions

    opts = SimOptions(**{"ppv": cand.ppv, "batch_size": batch_size, "method": method, "keep_timeline": False,
                         "optimizer_state_factor": optimizer_state_factor(cand),
                         **(extra_options or {})})
    last, first, k = _phases(cand)
    if first is not None and first.switch is not None:  # hybrid before its switch: all stale
        n = get_spec(cand.schedule).default_batches(first)
        first = replace(first, batches=n, switch=n)
    r_last = predict(profile, calibration, last, hw, opts)
    peaks = list(r_last.peak_memory_bytes)
    warnings = list(r_last.warnings)
    first_s = 0.0
    overhead = r_last.fill_drain_s
    detail: dict[str, Any] = {"sim_iteration_s": r_last.iteration_time_s,
                              "utilization_mean": sum(r_last.utilization) / max(1, len(r_last.utilization)),
                              "sequential_one_device_s": r_last.sequential_time_s}
    if first is not None:
        r_first = predict(profile, calibration, first, hw, opts)
        # a hybrid's stale phase runs to the end of its own batches: its rate is its mean
        first_s = (r_first.mean_iteration_time_s or r_first.iteration_time_s) if first.switch \
            else r_first.iteration_time_s
        n_dev = max(len(peaks), len(r_first.peak_memory_bytes))
        peaks = [max(a, b) for a, b in zip(_pad(peaks, n_dev), _pad(r_first.peak_memory_bytes, n_dev))]
        warnings += [w for w in r_first.warnings if w not in warnings]
        detail["first_phase"] = first.schedule
        if first.switch:  # the stale phase's fill/drain is inside its mean; the second phase's is small
            overhead = 0.0
    sources = ("measured", "interpolated", "roofline", "extrapolated", "given")
    src = r_last.cost_source
    return Timing(first_batches=k, first_s=first_s, steady_s=r_last.iteration_time_s, overhead_s=overhead,
                  peak_memory_bytes=tuple(int(p) for p in peaks),
                  cost_source=src if src in sources else "given", warnings=tuple(warnings), detail=detail)


def _pad(xs: Sequence[int], n: int) -> list[int]:
    return list(xs) + [0] * (n - len(xs))
