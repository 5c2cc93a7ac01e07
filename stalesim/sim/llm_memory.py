"""Memory per GPU of an LLM-scale plan: activations in flight, weight versions, training state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stalesim.sim.llm_plan import DOUBLE_BUFFER, FILL_DRAIN, INTERLEAVED, ONE_F_ONE_B, STASH, family

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.sim.model import StageCosts

__all__ = ["DeviceMemory", "activations", "device_memory", "in_flight", "weight_versions"]

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "weight_versions")


@dataclass(frozen=True)
class DeviceMemory:
    """The worst GPU's memory: its total bytes, the bytes per term, and which pipeline device it is."""

    total: int
    breakdown: dict[str, int]
    device: int


def device_memory(costs: StageCosts, plan: ParallelPlan, devices: Sequence[Sequence[int]],
                  event_acts: Sequence[float] | None = None) -> DeviceMemory:
    """Memory per GPU of the device that needs the most: the training state of its stages, the
    asynchronous schedules' extra weight versions, and the activations it holds at its peak
    (``event_acts``: measured by the event simulation, else :func:`activations`)."""
    S, M, V = costs.stages, plan.microbatches, plan.chunks
    sched, fam = plan.schedule, family(plan.schedule)
    sb = plan.state
    w_unsharded = plan.full_state.weights
    n_params = [p / w_unsharded for p in costs.param_bytes]
    best: dict[str, int] = {}
    best_total, best_dev = -1.0, 0
    for d, stages_d in enumerate(devices):
        comp = dict.fromkeys(COMPONENTS, 0.0)
        for s in stages_d:
            p = n_params[s]
            versions = weight_versions(sched, S, s)
            grads = 2 if fam == DOUBLE_BUFFER else 1
            comp["weights"] += p * sb.weights
            comp["weight_versions"] += p * sb.version * (versions - 1)
            comp["gradients"] += p * sb.gradients * grads
            comp["optimizer"] += p * sb.optimizer
        comp["activations"] = event_acts[d] if event_acts is not None else activations(costs, sched, S, M, d, V)
        total = sum(comp.values())
        if total > best_total:
            best_total, best_dev, best = total, d, {k: round(v) for k, v in comp.items()}
    return DeviceMemory(total=round(best_total), breakdown=best, device=best_dev)


def in_flight(schedule: str, S: int, M: int, s: int, chunks: int = 1) -> int:
    """Micro-batches (whole batches without micro-batching) whose activations stage (device) ``s``
    holds at its peak; the memory model's simultaneous count (checked in the tests)."""
    fam = family(schedule)
    if fam == FILL_DRAIN:
        return M
    if fam in (ONE_F_ONE_B, DOUBLE_BUFFER):
        return min(S - s, M)
    if fam == INTERLEAVED:
        R = S // chunks
        return min(M * chunks, (chunks - 1) * R + 2 * (R - 1 - s) + 1)
    if fam == STASH:
        return S - s
    return 2 * (S - 1 - s) + 1  # the register pipeline


def weight_versions(schedule: str, S: int, s: int) -> int:
    """Weight versions stage ``s`` keeps (live + stashed)."""
    fam = family(schedule)
    if fam == STASH:
        return S - s
    if fam == DOUBLE_BUFFER:
        return 1 if s == S - 1 else 2
    return 1


def activations(costs: StageCosts, sched: str, S: int, M: int, d: int, V: int) -> float:
    """Activation bytes device ``d`` holds at its peak: in-flight micro-batches x its stages' saved
    bytes (with chunks, the device's in-flight chunk micro-batches spread over its chunks)."""
    R = S // V
    if V == 1:
        return costs.saved_bytes[d] * in_flight(sched, S, M, d)
    per_chunk = max(costs.saved_bytes[s] for s in range(d, S, R))
    return per_chunk * in_flight(sched, S, M, d, V)
