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
  the gradients W reads (:meth:`StageCosts.deferred_w_bytes`). What else such a
  micro-batch holds depends on the runtime: this package's keeps its whole
  activation set until W (counted under activations, as above); the zero-bubble
  implementation frees after ``I`` everything W does not read and keeps only each
  weight layer's input (``w_input_bytes``, counted here beside the gradients; see
  docs/zero-bubble-memory.md);
* communication buffers: every receive buffer posted or received and not yet
  consumed (``recv_ahead`` kept posted), input gradients awaiting their send and
  sent messages not yet released (:mod:`stalesim.schedule.completion`), plus one
  gradient bucket (= the stage's params) per all-reduce in flight.

A device's peak is the largest *simultaneous* total over those samples (not the
sum of each component's maximum, which can exceed anything the device ever
holds); ``breakdown`` gives the components at that peak.

On CUDA a device also holds what exists only inside an action (gradients of
intermediate activations during a backward, cuDNN's workspace, the optimizer's
temporaries) and allocations no tensor of the run owns (cuBLAS's workspace, one per
thread that runs matrix products; the allocator's rounding), measured by
:func:`stalesim.runtime.memfacts.stage_cuda_memory_terms`. The first is per action
kind and stage (``StageCosts.transient_bytes``): an action's peak is the larger of the
states before and after it plus its transient, so it is added at the action that has it,
on the state the device holds then (``cuda_transient``); adding the largest transient to
the largest state instead over-predicts by whatever the device frees before that action
(a sequential run's last stage's activations, gone when the first stage's backward
peaks: 15% on ResNet-20). The second is a constant per device (``cuda_library``). On
the CPU both are absent and the samples are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stalesim.errors import StalesimError
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
                  gradient_shards: int = 1, weight_shards: int = 1,
                  w_input_bytes: Sequence[int] | None = None) -> MemoryReport:
    """Peak bytes per device: the largest simultaneous total after any compute action or,
    with the costs' CUDA terms (module doc), inside one: the larger of the totals before
    and after it plus its kind's transient for its stage, plus the device's library bytes.
    ``gradient_shards`` / ``weight_shards``: ZeRO's sharding of gradients and weights over
    the data-parallel group (each device holds 1/n of them). ``w_input_bytes``: per stage, the
    saved inputs of the weight layers that a deferred ``W`` reads; given, a (micro-)batch
    between its ``I`` and its ``W`` holds these and its gradients (``deferred_w``) instead of
    its whole activation set (a runtime that frees after ``I`` what ``W`` does not read);
    None: the whole set stays until ``W`` (this package's runtime)."""
    transient = costs.transient_table()
    library = int(costs.library_bytes)
    if counts is None:
        counts = stage_liveness(sched)
    bb = costs.buffer_bytes or (0,) * costs.stages
    ob = costs.optimizer_bytes or None  # measured per stage: wins over the factor
    msg = costs.msg_bytes
    dw = costs.deferred_w_bytes()
    if w_input_bytes is None and costs.w_input_bytes:
        w_input_bytes = costs.w_input_bytes
    frees = w_input_bytes is not None
    if w_input_bytes is not None and len(w_input_bytes) != costs.stages:
        raise StalesimError(f"w_input_bytes: {len(w_input_bytes)} values for {costs.stages} stages")
    w_in = tuple(w_input_bytes) if w_input_bytes is not None else (0,) * costs.stages
    peaks: list[int] = []
    breakdown: list[dict[str, int]] = []
    for d, samples in enumerate(memory_series(sched, recv_ahead=recv_ahead)):
        acts = sched.device_actions[d]
        best: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
        best_total = -1
        before: tuple[int, dict[str, int]] | None = None  # the state the next action starts from
        for smp in samples:
            b = dict.fromkeys(COMPONENTS, 0)
            for _w, s, alive, in_flight, grads, ar, deferred in smp.stages:
                pb = costs.param_bytes[s]
                b["weights"] += round(pb * alive / weight_shards) + bb[s]
                b["gradients"] += round(pb * grads / gradient_shards)
                b["optimizer"] += ob[s] if ob is not None else round(pb * optimizer_state_factor)
                whole = in_flight - deferred if frees else in_flight  # records still whole
                b["activations"] += costs.saved_bytes[s] * whole
                b["deferred_w"] += (dw[s] + w_in[s]) * deferred
                b["comm_buffers"] += pb * ar
            for _kind, s in smp.messages:
                b["comm_buffers"] += msg[s]
            # one storage: stage s's output is stage s+1's input. Reduced to W's inputs, a record
            # keeps the boundary tensor only if a weight layer reads it (not in a transformer
            # stage, which starts with a norm) and w_input_bytes counts it then: the storage is
            # shared only while both records are whole
            for s in (smp.shared_whole if frees else smp.shared):
                b["activations"] -= msg[s]
            total = sum(b.values())
            a = acts[smp.step]
            extra = transient[a.kind.value][a.stage] if a.kind.value in transient else 0
            # inside the action: the larger of the states around it (the first action's
            # "before" is its own "after": it can only have added to the static state)
            here_total, here = (total, b) if before is None or total >= before[0] else before
            if transient:
                here = dict(here, cuda_transient=extra)
            if here_total + extra > best_total:
                best, best_total = here, here_total + extra
            before = (total, b)
        peak = max(0, best_total)
        if library:
            best = dict(best, cuda_library=library)
            peak += library
        peaks.append(peak)
        breakdown.append(best)
    return MemoryReport(peaks, breakdown, counts)


def _counts(c: StageLiveness) -> dict[str, int]:
    return {k: getattr(c, k) for k in ("stage", "worker", "versions_kept", "grad_buffers",
                                       "max_in_flight", "comm_messages", "allreduce_in_flight",
                                       "deferred_w")}
