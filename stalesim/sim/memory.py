"""Memory model: bytes per device from the IR's liveness and the stage costs.

Nothing here is typed in per schedule, and nothing re-walks the action lists:
what each device holds after each of its compute actions comes from the
schedule's liveness pass (:func:`stalesim.schedule.liveness.memory_series`);
this module turns it into bytes, counting what the executor's accounting counts
(:mod:`stalesim.runtime.memory`, by unique storage):

* static: parameters, buffers (``StageCosts.buffer_bytes``) and optimizer state
  (``optimizer_state_factor`` x params; momentum SGD: 1);
* weight versions: params x (versions alive - 1) stashed beside the live ones;
* gradients: params x gradient buffers alive;
* sharded data parallelism (ZeRO-2/3, FSDP): each of ``gradient_shards`` ranks keeps
  1/shards of the gradients, each of ``weight_shards`` ranks 1/shards of the weights
  (the gathered layer an action uses for its duration is not counted);
* activations: the stage's ``saved_bytes`` (one in-flight action batch: its input,
  output and the tensors saved for its backward) x in flight (from F until the
  backward completes: B, or W for a split backward);
* deferred weight gradients: per (micro-)batch whose ``I`` ran and ``W`` not yet,
  the gradients W reads (:meth:`StageCosts.deferred_w_bytes`);
* communication buffers: every receive buffer posted or received and not yet
  consumed (``recv_ahead`` kept posted), input gradients awaiting their send and
  sent messages not yet released (:mod:`stalesim.schedule.completion`), plus one
  gradient bucket (= the stage's params) per all-reduce in flight.

A device's peak is the largest *simultaneous* total over those samples (not the
sum of each component's maximum, which can exceed anything the device ever
holds); ``breakdown`` gives the components at that peak.

On CUDA a device also holds what exists only inside an action (backward
intermediates, library workspaces) and allocations no tensor owns (cuBLAS's
workspace, the allocator's rounding): ``transient_bytes`` (per stage, measured by
:func:`stalesim.runtime.memfacts.stage_cuda_extra_bytes`; 0 on the CPU, where the
samples are exact) adds, per device, the largest entry of its stages, as the
``cuda_transient`` component. Without it nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stalesim.schedule.ir import Schedule
from stalesim.schedule.liveness import StageLiveness, memory_series, stage_liveness
from stalesim.sim.model import StageCosts

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "deferred_w", "comm_buffers")


@dataclass(frozen=True)
class MemoryReport:
    peak_bytes: list[int]  # per device
    breakdown: list[dict[str, int]]  # per device, COMPONENTS -> bytes at the peak
    stages: list[StageLiveness]

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_memory_bytes": list(self.peak_bytes),
            "memory_breakdown": [dict(b) for b in self.breakdown],
            "memory_counts": [_counts(s) for s in self.stages],
        }


def memory_report(sched: Schedule, costs: StageCosts, *, optimizer_state_factor: float = 1.0,
                  counts: list[StageLiveness] | None = None, recv_ahead: int = 1,
                  transient_bytes: Sequence[int] | None = None, gradient_shards: int = 1,
                  weight_shards: int = 1) -> MemoryReport:
    """Peak bytes per device: the largest simultaneous total after any compute action, plus
    (``transient_bytes``, per stage: the CUDA term of the module doc; default: the costs'
    own ``transient_bytes``) the largest term of the device's stages."""
    if transient_bytes is None and costs.transient_bytes:
        transient_bytes = costs.transient_bytes
    if counts is None:
        counts = stage_liveness(sched)
    bb = costs.buffer_bytes or (0,) * costs.stages
    ob = costs.optimizer_bytes or None  # measured per stage: wins over the factor
    msg = costs.msg_bytes
    dw = costs.deferred_w_bytes()
    peaks: list[int] = []
    breakdown: list[dict[str, int]] = []
    for samples in memory_series(sched, recv_ahead=recv_ahead):
        best: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
        best_total = -1
        here: set[int] = set()  # the stages this device runs
        for smp in samples:
            b = dict.fromkeys(COMPONENTS, 0)
            for _w, s, alive, in_flight, grads, ar, deferred in smp.stages:
                here.add(s)
                pb = costs.param_bytes[s]
                b["weights"] += round(pb * alive / weight_shards) + bb[s]
                b["gradients"] += round(pb * grads / gradient_shards)
                b["optimizer"] += ob[s] if ob is not None else round(pb * optimizer_state_factor)
                b["activations"] += costs.saved_bytes[s] * in_flight
                b["deferred_w"] += dw[s] * deferred
                b["comm_buffers"] += pb * ar
            for _kind, s in smp.messages:
                b["comm_buffers"] += msg[s]
            for s in smp.shared:  # one storage: stage s's output is stage s+1's input
                b["activations"] -= msg[s]
            total = sum(b.values())
            if total > best_total:
                best, best_total = b, total
        peak = max(0, best_total)
        if transient_bytes is not None:
            best = dict(best, cuda_transient=max((int(transient_bytes[s]) for s in here), default=0))
            peak += best["cuda_transient"]
        peaks.append(peak)
        breakdown.append(best)
    return MemoryReport(peaks, breakdown, counts)


def _counts(c: StageLiveness) -> dict[str, int]:
    return {k: getattr(c, k) for k in ("stage", "worker", "versions_kept", "grad_buffers",
                                       "max_in_flight", "comm_messages", "allreduce_in_flight",
                                       "deferred_w")}
