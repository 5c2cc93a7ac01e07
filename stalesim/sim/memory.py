"""Memory model: what each device holds, derived from the IR's action order.

Nothing here is typed in per schedule. Walking each device's list in order we
count, per stage:

* **weight versions kept**: the live weights plus every distinct older version
  a pending backward still needs (``F`` done, ``B`` not yet). Under ``stash`` /
  ``double-buffer`` a backward needs its forward's version (``a.version``);
  under ``latest`` it reads the live weights, so only one version is kept.
  PipeDream gives S - s, 2BW gives 2, every other schedule 1.
* **gradient buffers**: batches whose first ``B`` has run and whose ``U`` has
  not (per-batch buffers, see CONTRACTS.md). 2BW and Pipe-SGD hold 2.
* **stashed activations**: micro-batches in flight (``F`` done, ``B`` not), times
  the stage's ``saved_bytes`` at the action's batch size. GPipe: M; 1F1B:
  min(S - s, M); stale: 2(S - 1 - s) + 1.
* **optimizer state**: ``optimizer_state_factor`` x params (momentum SGD: 1).
* **communication buffers**: one buffer per kind of point-to-point message the
  stage sends or receives (activation out, gradient in, ...), plus one gradient
  bucket (= the stage's params) per all-reduce in flight (``AR`` issued, ``ARW``
  not yet): DDP-style buckets for the data-parallel schedules.

A device's peak is the sum of each component's maximum over the action order
(an upper bound; for these schedules the maxima coincide at the end of the
warm-up, when every in-flight batch holds its activations and versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stalesim.schedule.actions import Kind
from stalesim.schedule.ir import Schedule
from stalesim.sim.model import StageCosts

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "comm_buffers")


@dataclass(frozen=True)
class StageMemory:
    """Counts for one (worker, stage), derived from the action order."""

    stage: int
    worker: int
    versions_kept: int
    grad_buffers: int
    max_in_flight: int  # micro-batches with F done and B not yet
    comm_messages: int  # distinct point-to-point message kinds (one buffer each)
    allreduce_in_flight: int


def stage_memory_counts(sched: Schedule) -> list[StageMemory]:
    """Per (worker, stage), in device order."""
    stash = sched.policy.backward_reads_forward_version
    out: list[StageMemory] = []
    for acts in sched.device_actions:
        # state per (worker, stage) on this device
        state: dict[tuple[int, int], dict[str, Any]] = {}

        def st(a, state=state) -> dict[str, Any]:
            key = (a.worker, a.stage)
            s = state.get(key)
            if s is None:
                s = state[key] = {
                    "version": 0, "pending": {}, "vmax": 1, "grads": set(), "gmax": 0,
                    "fmax": 0, "msgs": set(), "ar": 0, "armax": 0,
                }
            return s

        for a in acts:
            s = st(a)
            k = a.kind
            if k is Kind.F:
                s["pending"][(a.batch, a.micro)] = a.version if a.version is not None else s["version"]
                s["fmax"] = max(s["fmax"], len(s["pending"]))
            elif k is Kind.B:
                s["grads"].add(a.batch)
                s["gmax"] = max(s["gmax"], len(s["grads"]))
                s["pending"].pop((a.batch, a.micro), None)
            elif k is Kind.U:
                s["version"] += 1
                s["grads"].discard(a.batch)
            elif k in (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B):
                s["msgs"].add(k)
            elif k is Kind.AR:
                s["ar"] += 1
                s["armax"] = max(s["armax"], s["ar"])
            elif k is Kind.ARW:
                s["ar"] -= 1
            if stash and k in (Kind.F, Kind.U):
                live = {s["version"]} | set(s["pending"].values())
                s["vmax"] = max(s["vmax"], len(live))
        for (w, stage), s in sorted(state.items()):
            out.append(StageMemory(stage, w, s["vmax"], s["gmax"], s["fmax"], len(s["msgs"]),
                                   s["armax"]))
    return out


@dataclass(frozen=True)
class MemoryReport:
    peak_bytes: list[int]  # per device
    breakdown: list[dict[str, int]]  # per device, COMPONENTS -> bytes
    stages: list[StageMemory]

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_memory_bytes": list(self.peak_bytes),
            "memory_breakdown": [dict(b) for b in self.breakdown],
            "memory_counts": [s.__dict__.copy() for s in self.stages],
        }


def memory_report(sched: Schedule, costs: StageCosts, *, optimizer_state_factor: float = 1.0,
                  counts: list[StageMemory] | None = None) -> MemoryReport:
    """Bytes per device from the counts (derived here unless given) and the stage costs."""
    if counts is None:
        counts = stage_memory_counts(sched)
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
        b["comm_buffers"] += costs.msg_bytes[c.stage] * c.comm_messages + pb * c.allreduce_in_flight
    peaks = [sum(b.values()) for b in breakdown]
    return MemoryReport(peaks, breakdown, counts)
