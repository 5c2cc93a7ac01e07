"""Memory model: bytes per device from the IR's liveness counts and the stage costs.

Nothing here is typed in per schedule, and nothing re-walks the action lists:
the counts (weight versions kept, gradient buffers, activations in flight,
message kinds, all-reduce buckets in flight) come from the schedule's liveness
pass (:mod:`stalesim.schedule.liveness`); this module turns them into bytes:

* weights: params x versions kept; gradients: params x gradient buffers;
* optimizer state: ``optimizer_state_factor`` x params (momentum SGD: 1);
* activations: the stage's ``saved_bytes`` at the action's batch size x in flight
  (from F until the backward completes: B, or W for a split backward);
* deferred weight gradients: per (micro-)batch whose ``I`` ran and ``W`` not yet,
  the intermediate gradients W reads (:meth:`StageCosts.deferred_w_bytes`);
* communication buffers: one buffer per point-to-point message kind, plus one
  gradient bucket (= the stage's params) per all-reduce in flight.

A device's peak is the sum of each component's maximum over the action order
(an upper bound; for these schedules the maxima coincide at the end of the
warm-up, when every in-flight batch holds its activations and versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stalesim.schedule.ir import Schedule
from stalesim.schedule.liveness import StageLiveness, stage_liveness
from stalesim.sim.model import StageCosts

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "deferred_w", "comm_buffers")

@dataclass(frozen=True)
class MemoryReport:
    peak_bytes: list[int]  # per device
    breakdown: list[dict[str, int]]  # per device, COMPONENTS -> bytes
    stages: list[StageLiveness]

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_memory_bytes": list(self.peak_bytes),
            "memory_breakdown": [dict(b) for b in self.breakdown],
            "memory_counts": [_counts(s) for s in self.stages],
        }


def memory_report(sched: Schedule, costs: StageCosts, *, optimizer_state_factor: float = 1.0,
                  counts: list[StageLiveness] | None = None) -> MemoryReport:
    """Bytes per device from the counts (derived here unless given) and the stage costs."""
    if counts is None:
        counts = stage_liveness(sched)
    n_dev = sched.num_devices
    breakdown = [dict.fromkeys(COMPONENTS, 0) for _ in range(n_dev)]
    for c in counts:
        d = sched.device_of(c.stage, c.worker)
        pb = costs.param_bytes[c.stage]
        b = breakdown[d]
        b["weights"] += pb * c.versions_kept
        b["gradients"] += pb * c.grad_buffers
        b["optimizer"] += round(pb * optimizer_state_factor)
        b["activations"] += costs.saved_bytes[c.stage] * c.max_in_flight
        b["deferred_w"] += costs.deferred_w_bytes()[c.stage] * c.deferred_w
        b["comm_buffers"] += costs.msg_bytes[c.stage] * c.comm_messages + pb * c.allreduce_in_flight
    peaks = [sum(b.values()) for b in breakdown]
    return MemoryReport(peaks, breakdown, counts)


def _counts(c: StageLiveness) -> dict[str, int]:
    return {k: getattr(c, k) for k in ("stage", "worker", "versions_kept", "grad_buffers",
                                       "max_in_flight", "comm_messages", "allreduce_in_flight",
                                       "deferred_w")}
