"""The communication of an LLM-scale plan: per-rank hardware, pipeline messages, data-parallel and ZeRO collectives."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from stalesim.sim.model import NS, SimHardware

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import Hardware

__all__ = ["dp_allreduce_s", "p2p_s", "rank_hardware", "zero_collectives"]


# ---------------------------------------------------------------- stage costs
def rank_hardware(hw: Hardware, tp: int) -> SimHardware:
    """The simulator's hardware with one tensor-parallel group as a device: a node of G GPUs
    holds G / t such devices; links and NICs stay per GPU (each rank moves its 1/t)."""
    sim = SimHardware.from_hardware(hw)
    if sim.cluster is not None:
        G = sim.cluster.node_size
        sim = replace(sim, cluster=replace(sim.cluster, node_size=max(1, G // tp)))
    return sim


def zero_collectives(sim: SimHardware, plan: ParallelPlan, pbytes: tuple[int, ...], f: list[float],
                      bk: list[float], wg: list[float]) -> tuple[list[float], list[float], list[float],
                                                                  tuple[int, ...]]:
    """ZeRO's communication per stage (Rajbhandari et al. 2020, section 7: 2 x the parameters per
    step for stages 1 and 2, 3 x for stage 3), with gradient accumulation over M micro-batches as
    DeepSpeed runs it, not overlapped with compute (as every collective here):

    * stage 0/1: the gradients accumulate locally; one all-reduce (1: reduce-scatter + the
      updated weights' all-gather, the same bytes) at the end of the batch;
    * stage 2: each micro-batch's backward reduce-scatters its gradients into the rank's shard
      (in the weight-gradient part W), and the updated weights are all-gathered at the end;
    * stage 3: each micro-batch's forward and backward all-gather the stage's weights, its
      backward reduce-scatters the gradients; nothing is left for the end of the batch.

    A reduce-scatter or all-gather of n bytes is timed as an all-reduce of n / 2 (the ring's
    bandwidth term; its latency term counted twice). Returns F, B and W seconds per micro-batch
    and the end-of-batch all-reduce bytes (empty: the whole gradient all-reduce)."""
    if plan.zero <= 1 or plan.dp <= 1:
        return f, bk, wg, ()
    half = [dp_allreduce_s(sim, plan, pb // 2) for pb in pbytes]  # one reduce-scatter or all-gather
    bk = [x + c for x, c in zip(bk, half)]
    wg = [x + c for x, c in zip(wg, half)]
    if plan.zero == 2:
        return f, bk, wg, tuple(pb // 2 for pb in pbytes)
    f = [x + c for x, c in zip(f, half)]
    bk = [x + c for x, c in zip(bk, half)]
    return f, bk, wg, (0,) * len(pbytes)


def p2p_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """One inter-stage message: the network when a pipeline spans nodes, else the node's link."""
    c = sim.cluster
    # Megatron's rank order (tensor, data, pipeline): a stage's dp ranks are consecutive, so a
    # node of G / t rank groups holds (G / t) / dp stages
    if c is not None and plan.pp * plan.dp > c.node_size:
        return (c.inter_latency_ns + c.serialize_ns(nbytes)) / NS
    return sim.p2p_ns(nbytes) / NS


def dp_allreduce_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """A stage's gradient all-reduce over its ``dp`` replicas (Megatron's rank order: tensor,
    then data, then pipeline), hierarchical on a cluster (:meth:`SimHardware.group_allreduce_ns`).
    ZeRO-2/3 move other bytes (:func:`zero_collectives`)."""
    if plan.dp <= 1 or nbytes <= 0:
        return 0.0
    G = sim.cluster.node_size if sim.cluster is not None else plan.dp
    k = min(plan.dp, G)
    per_node = [k] * (plan.dp // k) + ([plan.dp % k] if plan.dp % k else [])
    return sim.group_allreduce_ns(nbytes, per_node) / NS
