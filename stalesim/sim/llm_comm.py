"""The communication of an LLM-scale plan: per-rank hardware, pipeline messages, and the data-parallel,
ZeRO and FSDP collectives with each framework's bucketing and overlap.

Collectives (:func:`ring_s`) follow NCCL's own cost model for its ring algorithm
(``src/graph/tuning.cc``, ``ncclTopoTuneModel``): an all-gather or a reduce-scatter of ``n`` bytes
over ``P`` ranks takes ``P - 1`` steps, an all-reduce ``2 (P - 1)``; of those, ``m - 1``
(all-reduce: ``2 (m - 1)``) cross the network when the group spans ``m`` nodes and the rest stay on
the node's link, each step paying that hop's latency, plus one base latency per call. Each rank
moves ``(P - 1) / P x n`` bytes (all-reduce twice that) at the ring's bottleneck bandwidth: the
node's link on one node; across nodes the smaller of the node's link and the network bandwidth of
the group's members on one node together (NCCL runs one ring channel per NIC, so ``k`` members of a
node with one NIC each give ``k`` NICs' bandwidth: the same bytes per NIC as the hierarchical
all-reduce of :meth:`stalesim.workloads.hardware.ClusterSpec.allreduce_time`). The latency term
grows with the ring: at 1,536 ranks a call costs milliseconds, which is why ZeRO-3 slows down as
its data-parallel group grows.

Frameworks (:data:`FRAMEWORK_COMM`) differ in how many collectives they issue (buckets, one per
layer, one per model chunk) and in what they overlap with compute; each default is read from the
framework's source and cited there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError
from stalesim.sim.llm_plan import ONE_F_ONE_B, family
from stalesim.sim.model import NS, SimHardware

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import Hardware

__all__ = ["ALL_GATHER", "ALL_REDUCE", "COLLECTIVES", "FRAMEWORK_COMM", "NCCL_LATENCY", "REDUCE_SCATTER",
           "FrameworkComm", "NcclLatency", "Overlaps", "allgather_s", "allreduce_s", "backward_refetch",
           "blocking_p2p_s", "p2p_hops_s",
           "dp_allreduce_s", "list_copies_s",
           "dp_sync_s", "group_layout", "overlapped_s", "overlaps", "p2p_s", "rank_hardware", "reduce_scatter_s",
           "ring_s", "sharding_stage", "tp_backward_hidden_s", "zero_collectives"]

ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE = "all-gather", "reduce-scatter", "all-reduce"
COLLECTIVES = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)


@dataclass(frozen=True)
class NcclLatency:
    """Seconds per ring step by hop type and the base latency of one call (NCCL's ``baseLat`` and
    ``hwLat`` tables for the Ring algorithm and the Simple protocol, which NCCL picks for the
    megabyte-sized messages of training)."""

    base: float
    nvlink: float
    pci: float
    net: float


# NCCL src/graph/tuning.cc (v2.12 to v2.18): baseLat Ring/Simple 8.4 us; hwLat Ring/Simple
# NVLink 3.4 us, PCI 5.7 us, NET 9.6 us. A step never costs less than its link's own latency.
NCCL_LATENCY = NcclLatency(base=8.4e-6, nvlink=3.4e-6, pci=5.7e-6, net=9.6e-6)


# ---------------------------------------------------------------- frameworks
@dataclass(frozen=True)
class FrameworkComm:
    """What a framework overlaps by default and how it groups its collectives.

    ``tp_overlap``: the backward's tensor-parallel collective runs while the weight-gradient GEMM
    computes. ``dp_overlap``: gradient buckets are reduced during the backward. ``zero_prefetch``:
    ZeRO-3/FSDP all-gather the next unit's weights while the current one computes.
    ``grad_bucket``: elements per gradient-reduce bucket (None: one collective per model chunk);
    ``grad_bucket_per_rank``: added elements per data-parallel rank (Megatron's rule);
    ``gather_bucket``: elements per ZeRO-3 parameter fetch (None: one fetch per layer);
    ``tensors_per_layer``: the largest number of fetches a layer needs (one per weight matrix).
    ``p2p_blocking``: the schedule families (:func:`stalesim.sim.llm_plan.family`) whose pipeline
    transfers the framework waits for before the next compute: each exchange of activations or
    gradients between neighbouring stages holds both devices until it is done (the others post
    their sends and receives and wait only where the data is consumed; :func:`blocking_p2p_s`).
    ``copies_per_rank``: its ZeRO collectives pass one tensor per rank
    (``torch.distributed.all_gather`` / ``reduce_scatter`` with tensor lists): the framework
    cuts one ``narrow`` view per rank in a Python loop, and PyTorch's ProcessGroupNCCL turns the
    list into a flat buffer plus one ``copy_`` per rank on every call
    (``flatten_for_scatter_gather`` and the copy-out loop of ``ProcessGroupNCCL::allgather``).
    """

    tp_overlap: bool
    dp_overlap: bool
    zero_prefetch: bool
    grad_bucket: float | None
    gather_bucket: float | None
    tensors_per_layer: int
    source: str
    grad_bucket_per_rank: float = 0.0
    copies_per_rank: bool = False
    p2p_blocking: tuple[str, ...] = ()


_MEGATRON = (
    "Megatron-LM megatron/training/arguments.py: --overlap-grad-reduce, --overlap-param-gather and "
    "--tp-comm-overlap are store_true flags (off by default); megatron/core/tensor_parallel/layers.py "
    "(LinearWithGradAccumulationAndAsyncCommunication) launches the input-gradient all-reduce (with "
    "sequence parallelism: reduce-scatter) asynchronously before the weight-gradient GEMM, always; "
    "megatron/core/distributed/distributed_data_parallel.py: bucket_size = max(4e7, 1e6 x dp) "
    "elements with --overlap-grad-reduce, else one bucket per model chunk; pipeline transfers: "
    "arguments.py sets overlap_p2p_comm False without virtual stages, so "
    "forward_backward_pipelining_without_interleaving exchanges with batch_isend_irecv, waits, and "
    "p2p_communication._communicate calls torch.cuda.synchronize() (batch_p2p_sync, default True); the "
    "interleaved schedule overlaps them unless --no-overlap-p2p-communication (overlap_p2p_comm, "
    "May 2023; before it, the interleaved exchanges blocked too); the zero-bubble fork's runtime "
    "(zb_schedules.py) posts batch_isend_irecv and waits only before the consuming F or B")
# DeepSpeed's pipeline engine: blocking sends and receives; torch pipelining: overlapped
_DEEPSPEED_PIPE = ("DeepSpeed deepspeed/runtime/pipe/engine.py: the PipelineEngine's TrainSchedule (1F1B) sends "
                   "and receives through deepspeed/runtime/pipe/p2p.py, whose send / recv assert async_op is "
                   "False (blocking torch.distributed send / recv)")
FRAMEWORK_COMM: dict[str, FrameworkComm] = {
    "megatron": FrameworkComm(tp_overlap=True, dp_overlap=False, zero_prefetch=False, grad_bucket=4e7,
                              grad_bucket_per_rank=1e6, gather_bucket=None, tensors_per_layer=1, source=_MEGATRON,
                              p2p_blocking=(ONE_F_ONE_B,)),
    "megatron-distopt": FrameworkComm(tp_overlap=True, dp_overlap=False, zero_prefetch=False, grad_bucket=4e7,
                                      grad_bucket_per_rank=1e6, gather_bucket=None, tensors_per_layer=1,
                                      source=_MEGATRON, p2p_blocking=(ONE_F_ONE_B,)),
    "deepspeed": FrameworkComm(
        tp_overlap=False, dp_overlap=False, zero_prefetch=True, grad_bucket=5e8, gather_bucket=5e7,
        tensors_per_layer=4, p2p_blocking=(ONE_F_ONE_B,),
        source=_DEEPSPEED_PIPE + "; deepspeed/runtime/zero/config.py: reduce_bucket_size = allgather_bucket_size = 5e8 "
               "elements, stage3_prefetch_bucket_size = 5e7 (prefetching on), overlap_comm defaults to True "
               "for stage 3 only (validator overlap_comm_valid); parameters are fetched per submodule, so "
               "a layer's four weight matrices are at most four fetches; no tensor parallelism of its own"),
    "deepspeed-2021": FrameworkComm(
        tp_overlap=False, dp_overlap=False, zero_prefetch=False, grad_bucket=5e8, gather_bucket=5e7,
        tensors_per_layer=4, copies_per_rank=True, p2p_blocking=(ONE_F_ONE_B,),
        source=_DEEPSPEED_PIPE + "; DeepSpeed v0.3.13 to v0.5 (2021): deepspeed/runtime/zero/partition_parameters.py "
               "_allgather_param gathers each parameter with torch.distributed.all_gather into a list of "
               "one view per rank and _reduce_scatter_gradient reduce-scatters each from a list; "
               "stage3.py's PartitionedParameterCoordinator.fetch_sub_module waits for its gathers and "
               "calls torch.cuda.synchronize(), and with overlap_comm off (its default then) the gathers "
               "and the prefetch run on the compute stream: nothing overlaps"),
    "fsdp2": FrameworkComm(
        tp_overlap=False, dp_overlap=True, zero_prefetch=True, grad_bucket=None, gather_bucket=None,
        tensors_per_layer=1,
        source="PyTorch torch/distributed/fsdp/_fully_shard: one all-gather and one reduce-scatter per "
               "fully_shard unit (torchtitan wraps each transformer block), issued on separate streams: "
               "the next unit's all-gather is prefetched (implicit forward prefetch, backward prefetch "
               "by default) and reduce-scatters overlap the remaining backward; torch.distributed.pipelining "
               "(torchtitan's pipelines) posts its sends and receives with batch_isend_irecv and waits for a "
               "receive before the action that consumes it"),
}


@dataclass(frozen=True)
class Overlaps:
    """The plan's overlaps, each the plan's own setting or its framework's default (``p2p``: the
    pipeline's transfers run under compute; False: each exchange blocks, :func:`blocking_p2p_s`)."""

    tp: bool
    dp: bool
    prefetch: bool
    p2p: bool


def framework_comm(plan: ParallelPlan) -> FrameworkComm:
    if plan.framework not in FRAMEWORK_COMM:
        raise StalesimError(f"framework: expected one of {', '.join(FRAMEWORK_COMM)}, got {plan.framework!r}")
    return FRAMEWORK_COMM[plan.framework]


def overlaps(plan: ParallelPlan) -> Overlaps:
    """``plan.tp_overlap`` / ``dp_overlap`` / ``zero_prefetch`` / ``p2p_overlap``, None meaning the
    framework's default."""
    fw = framework_comm(plan)
    # DeepSpeed's overlap_comm defaults to on for ZeRO stage 3 only
    dp_default = fw.dp_overlap or (plan.framework == "deepspeed" and sharding_stage(plan) == 3)  # not 2021's
    return Overlaps(tp=fw.tp_overlap if plan.tp_overlap is None else plan.tp_overlap,
                    dp=dp_default if plan.dp_overlap is None else plan.dp_overlap,
                    prefetch=fw.zero_prefetch if plan.zero_prefetch is None else plan.zero_prefetch,
                    p2p=family(plan.schedule) not in fw.p2p_blocking if plan.p2p_overlap is None
                    else plan.p2p_overlap)


def sharding_stage(plan: ParallelPlan) -> int:
    """The ZeRO stage the framework runs: Megatron's distributed optimizer shards the optimizer
    state (stage 1) at least; FSDP2 with ``zero`` 0 is torchtitan's default (3 without a pipeline,
    2 with one: ``reshard_after_forward`` off under pipeline parallelism)."""
    if plan.framework == "megatron-distopt":
        return max(plan.zero, 1) if plan.dp > 1 else 0
    if plan.framework == "fsdp2" and plan.zero == 0 and plan.dp > 1:
        return 3 if plan.pp == 1 else 2
    return plan.zero if plan.dp > 1 else 0


# ---------------------------------------------------------------- hardware
def rank_hardware(hw: Hardware, tp: int) -> SimHardware:
    """The simulator's hardware with one tensor-parallel group as a device: a node of G GPUs
    holds G / t such devices; links and NICs stay per GPU (each rank moves its 1/t over its own
    GPU's NIC: the catalog's nodes have one per GPU)."""
    sim = SimHardware.from_hardware(hw)
    if sim.cluster is not None:
        G = sim.cluster.node_size
        sim = replace(sim, cluster=replace(sim.cluster, node_size=max(1, G // tp)))
    return sim


def group_layout(sim: SimHardware, size: int) -> tuple[int, int]:
    """``(k, m)``: a group of ``size`` consecutive rank devices has ``k`` members on each of ``m``
    nodes (Megatron's rank order puts a stage's data-parallel ranks next to each other)."""
    c = sim.cluster
    if c is None or size <= c.node_size:
        return size, 1
    return c.node_size, math.ceil(size / c.node_size)


def _hop_latency(link_latency_s: float, nccl_s: float) -> float:
    return max(link_latency_s, nccl_s)


def ring_s(sim: SimHardware, op: str, nbytes: float, size: int) -> float:
    """Seconds of one ring ``op`` (:data:`COLLECTIVES`) of ``nbytes`` (the full buffer: an
    all-gather's output, a reduce-scatter's input) over ``size`` rank devices (module doc)."""
    if op not in COLLECTIVES:
        raise StalesimError(f"collective: expected one of {', '.join(COLLECTIVES)}, got {op!r}")
    P = int(size)
    if P <= 1 or nbytes <= 0 or sim.is_ideal:
        return 0.0
    k, m = group_layout(sim, P)
    twice = 2 if op == ALL_REDUCE else 1
    steps, inter_steps = twice * (P - 1), twice * (m - 1)
    gpu_link = sim.link.startswith(("nvlink", "pcie"))
    nccl = NCCL_LATENCY
    intra = _hop_latency(sim.latency_ns / NS, (nccl.nvlink if sim.link.startswith("nvlink") else nccl.pci)
                         if gpu_link else 0.0)
    lat = (nccl.base if gpu_link else 0.0) + (steps - inter_steps) * intra
    bw = sim.bandwidth_Bps
    c = sim.cluster
    if m > 1 and c is not None:
        lat += inter_steps * _hop_latency(c.inter_latency_ns / NS, nccl.net)
        bw = min(bw, k * c.inter_bandwidth_Bps)
    return lat + (0.0 if math.isinf(bw) else steps / P * nbytes / bw)


def allgather_s(sim: SimHardware, plan: ParallelPlan, nbytes: float, count: int = 1,
                copy_Bps: float = math.inf) -> float:
    """``count`` all-gathers of ``nbytes / count`` each over the plan's data-parallel group
    (``copy_Bps``: the device's copy bandwidth, for :func:`list_copies_s`)."""
    return _calls(sim, plan, ALL_GATHER, nbytes, count, copy_Bps)


def reduce_scatter_s(sim: SimHardware, plan: ParallelPlan, nbytes: float, count: int = 1,
                     copy_Bps: float = math.inf) -> float:
    """``count`` reduce-scatters of ``nbytes / count`` each over the data-parallel group."""
    return _calls(sim, plan, REDUCE_SCATTER, nbytes, count, copy_Bps)


def allreduce_s(sim: SimHardware, plan: ParallelPlan, nbytes: float, count: int = 1) -> float:
    """``count`` all-reduces of ``nbytes / count`` each over the data-parallel group."""
    return _calls(sim, plan, ALL_REDUCE, nbytes, count)


def _calls(sim: SimHardware, plan: ParallelPlan, op: str, nbytes: float, count: int,
           copy_Bps: float = math.inf) -> float:
    if nbytes <= 0 or plan.dp <= 1:
        return 0.0
    n = max(1, int(count))
    return n * (ring_s(sim, op, nbytes / n, plan.dp) + list_copies_s(plan, op, nbytes / n, copy_Bps))


def list_copies_s(plan: ParallelPlan, op: str, call_bytes: float = 0.0, copy_Bps: float = math.inf) -> float:
    """Seconds one call of ``call_bytes`` (the full buffer) spends on a framework's per-rank
    tensor list (:attr:`FrameworkComm.copies_per_rank`): per data-parallel rank one ``narrow``
    view and one eager ``copy_``, each at the dispatch cost of one op
    (:data:`~stalesim.workloads.hardware.DEFAULT_OP_OVERHEAD_S`, which the project charges to
    metadata ops too), and on the device the copies themselves: together they read and write
    the whole buffer once (ProcessGroupNCCL's flat staging buffer: all-gather copies it out to
    the list, reduce-scatter copies the list into it) at ``copy_Bps``. All-reduces take one
    tensor: none."""
    from stalesim.workloads.hardware import DEFAULT_OP_OVERHEAD_S

    if op == ALL_REDUCE or not framework_comm(plan).copies_per_rank:
        return 0.0
    return 2 * plan.dp * DEFAULT_OP_OVERHEAD_S + 2 * call_bytes / copy_Bps


def backward_refetch(plan: ParallelPlan, linears: Sequence[float]) -> tuple[float, int]:
    """ZeRO-3 fetches in a layer's backward beyond one of every linear: ``(parameters, fetches)``
    per layer (``linears``: a layer's weight matrices per rank, in forward order).

    With full recomputation (or op-level: it re-runs every sub-module's forward, its saved
    outputs short-circuiting only the products) the backward first re-runs the layer's forward,
    and DeepSpeed's sub-module hooks fetch its weights for it; each linear's backward then runs after the
    later linears' recomputed forwards and backwards, so the coordinator released its weights
    unless those number fewer than ``stage3_max_reuse_distance``
    (:data:`~stalesim.workloads.memory_llm.DEEPSPEED_MAX_REUSE_DISTANCE`): the last linear always stays,
    an earlier one is fetched again when ``2 x`` the later linears' parameters reach it. FSDP2
    gathers the whole block before its recomputation and keeps it through the backward: none."""
    from stalesim.workloads.memory_llm import DEEPSPEED, DEEPSPEED_MAX_REUSE_DISTANCE

    if plan.framework not in DEEPSPEED or plan.recompute not in ("full", "op"):
        return 0.0, 0
    again = [p for i, p in enumerate(linears) if 2 * sum(linears[i + 1:]) >= DEEPSPEED_MAX_REUSE_DISTANCE]
    return float(sum(again)), len(again)


def dp_allreduce_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """One all-reduce of ``nbytes`` over a stage's ``dp`` replicas (:func:`ring_s`)."""
    return allreduce_s(sim, plan, nbytes)


def overlapped_s(comm_s: float, calls: int, compute_s: float) -> float:
    """Exposed seconds of ``calls`` equal collectives (``comm_s`` in all) issued one per unit of
    ``calls`` equal units of compute (``compute_s`` in all), each overlapping the next unit's
    compute: the first (or last) call is exposed, the others only where they outlast the unit
    they hide under: ``c + (n - 1) max(0, c - t / n)``."""
    n = max(1, int(calls))
    c = comm_s / n
    return c + (n - 1) * max(0.0, c - compute_s / n)


def _buckets(nbytes: float, element_bytes: float, bucket: float | None) -> int:
    if bucket is None or nbytes <= 0:
        return 1
    return max(1, math.ceil(nbytes / element_bytes / bucket))


def _grad_bucket(plan: ParallelPlan, fw: FrameworkComm, ov: Overlaps) -> float | None:
    if fw.grad_bucket is None:
        return None
    if fw.grad_bucket_per_rank and not ov.dp:  # Megatron: one bucket per model chunk unless overlapped
        return None
    return max(fw.grad_bucket, fw.grad_bucket_per_rank * plan.dp)


def _gathers(plan: ParallelPlan, fw: FrameworkComm, nbytes: float, element_bytes: float, layers: int | None) -> int:
    """ZeRO-3 / FSDP parameter fetches of a stage's ``nbytes``: per bucket, at most
    ``tensors_per_layer`` per layer (a tensor larger than the bucket is fetched whole); one per
    layer without a bucket; without a layer count, the bucket count (or one)."""
    by_bucket = _buckets(nbytes, element_bytes, fw.gather_bucket)
    if layers is None:
        return by_bucket
    if fw.gather_bucket is None:
        return max(1, layers)
    return max(1, min(by_bucket, layers * fw.tensors_per_layer))


# ---------------------------------------------------------------- stage costs
def zero_collectives(sim: SimHardware, plan: ParallelPlan, pbytes: tuple[int, ...], f: list[float],
                     bk: list[float], wg: list[float], *, layers: Sequence[int] | None = None,
                     linears: Sequence[float] = (), copy_Bps: float = math.inf,
                     ) -> tuple[list[float], list[float], list[float], tuple[int, ...]]:
    """ZeRO-2/3 and FSDP communication per micro-batch, added to each stage's F, B and W seconds
    (``pbytes``: a stage's weight bytes per rank; ``layers``: its layer count, None when unknown;
    ``linears``: a layer's weight matrices per rank, for what recomputation fetches again:
    :func:`backward_refetch`; ``copy_Bps``: the device's copy bandwidth, :func:`list_copies_s`).

    Per micro-batch, by the stage the framework runs (:func:`sharding_stage`):

    * stage 2 without a pipeline: the backward reduce-scatters the gradients (in the weight-gradient
      part W) in ``reduce_bucket_size`` buckets; DeepSpeed all-gathers the updated weights at the
      end of the batch, FSDP2 in every forward (it reshards after each backward);
    * stage 3: the forward and the backward all-gather the stage's weights (one fetch per layer or
      prefetch bucket) and the backward reduce-scatters the gradients;
    * with a pipeline (FSDP2 under ``torch.distributed.pipelining``, whose stages turn off gradient
      sync and resharding after backward until the last micro-batch): stage 2 keeps the gathered
      weights for the whole batch and stage 3 still all-gathers them per micro-batch; the
      gradients are reduce-scattered once, at the end of the batch.

    With prefetch (:func:`overlaps`), a fetch hides under the previous unit's compute and the
    reduce-scatters under the rest of the backward (:func:`overlapped_s`). Returns F, B, W and the
    end-of-batch bytes the event engine all-reduces (a reduce-scatter plus an all-gather of ``n``
    move what an all-reduce of ``n`` does; an all-gather alone, half of it)."""
    z = sharding_stage(plan)
    if z <= 1:
        return f, bk, wg, ()
    fw, ov = framework_comm(plan), overlaps(plan)
    element_bytes = plan.full_state.weights  # buckets count elements of the weights' dtype
    S = len(pbytes)
    nl: list[int | None] = list(layers) if layers is not None else [None] * S
    f, bk, wg = list(f), list(bk), list(wg)
    end: list[int] = []
    piped = plan.pp > 1
    again_params, again_calls = backward_refetch(plan, linears)
    # FSDP2 gathers its weights in the forward of every micro-batch (it reshards after each
    # backward); DeepSpeed's stage 2 keeps them replicated and gathers the updated ones at the end
    gather_forward = z >= 3 or (z == 2 and plan.framework == "fsdp2" and not piped)
    for s, pb in enumerate(pbytes):
        gathers = _gathers(plan, fw, pb, element_bytes, nl[s])
        rs_calls = gathers if fw.grad_bucket is None else _buckets(pb, element_bytes, fw.grad_bucket)
        rs = 0.0 if piped else reduce_scatter_s(sim, plan, pb, rs_calls, copy_Bps)
        ag_f = allgather_s(sim, plan, pb, gathers, copy_Bps) if gather_forward else 0.0
        ag_b = allgather_s(sim, plan, pb, gathers, copy_Bps) if z >= 3 else 0.0
        if z >= 3 and again_calls and nl[s]:
            n_again = (nl[s] or 0) // plan.recompute_every  # the layers recomputed
            ag_b += allgather_s(sim, plan, n_again * again_params * element_bytes, n_again * again_calls, copy_Bps)
        if ov.prefetch and ag_f:
            ag_f = overlapped_s(ag_f, gathers, f[s])
        if ov.prefetch or ov.dp:  # the backward's fetches and reduce-scatters share the comm stream
            comm_b = overlapped_s(ag_b + rs, max(gathers, rs_calls), bk[s])
        else:
            comm_b = ag_b + rs
        f[s] += ag_f
        bk[s] += comm_b
        wg[s] += min(comm_b, rs)  # the reduce-scatter follows the weight gradients
        if piped:  # the batch's one reduce-scatter (+ stage 2: the next batch's one all-gather)
            end.append(pb // 2 if z >= 3 else pb)
        else:  # DeepSpeed's stage 2: the updated weights' all-gather
            end.append(pb // 2 if z == 2 and not gather_forward else 0)
    return f, bk, wg, tuple(end)


def dp_sync_s(sim: SimHardware, plan: ParallelPlan, pbytes: Sequence[int], backward_s: float) -> float:
    """Exposed seconds of a device's end-of-batch gradient synchronisation over its stages'
    weight bytes ``pbytes`` (one entry per model chunk; ``backward_s``: the last micro-batch's
    backward seconds on the device, what a bucketed reduce can hide under).

    * stage 0: an all-reduce per gradient bucket (Megatron: one per model chunk, or buckets of
      ``max(4e7, 1e6 dp)`` elements with ``--overlap-grad-reduce``; DeepSpeed: 5e8-element buckets);
    * stage 1 (and Megatron's distributed optimizer): a reduce-scatter of the gradients and an
      all-gather of the updated weights, the same buckets;
    * stage 2: the all-gather of the updated weights (the reduce-scatters ran per micro-batch);
    * stage 2/3 under a pipeline (FSDP2): the one reduce-scatter of the batch (stage 2: and the
      next batch's one all-gather); stage 3 otherwise, and FSDP2's stage 2: nothing.

    With ``dp_overlap`` the reduce of each bucket runs under the backward of the layers before it,
    and only what outlasts that compute is exposed (:func:`overlapped_s`); the updated weights'
    all-gather is exposed (Megatron's ``--overlap-param-gather``, off by default, would hide it
    under the next forward)."""
    z = sharding_stage(plan)
    if plan.dp <= 1:
        return 0.0
    fw, ov = framework_comm(plan), overlaps(plan)
    element_bytes = plan.full_state.weights
    bucket = _grad_bucket(plan, fw, ov)
    reduce_s, calls, gather_s = 0.0, 0, 0.0
    for pb in pbytes:
        if pb <= 0:
            continue
        n = _buckets(pb, element_bytes, bucket)
        if z == 0:
            reduce_s += allreduce_s(sim, plan, pb, n)
        elif z == 1 or plan.pp > 1:
            reduce_s += reduce_scatter_s(sim, plan, pb, n)
            if z <= 2:
                gather_s += allgather_s(sim, plan, pb, n)
        elif z == 2 and plan.framework != "fsdp2":
            gather_s += allgather_s(sim, plan, pb, _buckets(pb, element_bytes, fw.grad_bucket))
        calls += n
    if z >= 2 and plan.pp == 1:
        return gather_s
    if ov.dp and calls:
        reduce_s = overlapped_s(reduce_s, calls, backward_s)
    return reduce_s + gather_s


def tp_backward_hidden_s(collective_s: float, colpar_wgrad_s: float, collectives: int = 2) -> float:
    """Seconds of a layer's backward tensor-parallel collectives hidden under its weight-gradient
    GEMMs (Megatron: the input-gradient all-reduce of each column-parallel linear (QKV, MLP in)
    runs while that linear's weight gradient computes): ``min(collectives x c, W of those linears)``."""
    return min(collectives * collective_s, colpar_wgrad_s)


def _hop_crossings(sim: SimHardware, plan: ParallelPlan) -> list[bool]:
    """Per device d, whether its hop to device d + 1 (the last: back to device 0) crosses nodes.
    Megatron's rank order (tensor, data, pipeline) puts a stage's dp rank groups next to each
    other, so a node of G / t rank groups holds (G / t) / dp consecutive pipeline ranks; once the
    pipeline spans nodes the wrap-around from the last device to the first crosses too."""
    c, R = sim.cluster, plan.pp
    if c is None or plan.pp * plan.dp <= c.node_size:
        return [False] * R
    per_node = max(1, c.node_size // plan.dp)
    return [(d + 1) % per_node == 0 or d == R - 1 for d in range(R)]


def _inter_s(sim: SimHardware, nbytes: int) -> float:
    c = sim.cluster
    assert c is not None  # only asked where a hop crosses nodes
    return (c.inter_latency_ns + c.serialize_ns(nbytes)) / NS


def p2p_hops_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> list[float]:
    """Seconds of one inter-stage message over each of the pipeline's ``pp`` hops, device d to
    d + 1 (the last: device pp - 1 back to device 0, where the next model chunk starts): the
    network's latency and bandwidth for hops between nodes, the node's link for the others."""
    cross = _hop_crossings(sim, plan)
    intra = sim.p2p_ns(nbytes) / NS
    inter = _inter_s(sim, nbytes) if any(cross) else intra
    return [inter if x else intra for x in cross]


def p2p_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """One inter-stage message, averaged over the S - 1 hops a micro-batch takes through the
    pipeline's S = pp x chunks stages: V passes through the devices joined by V - 1 wrap-arounds,
    each hop as :func:`p2p_hops_s` times it."""
    cross = _hop_crossings(sim, plan)
    intra = sim.p2p_ns(nbytes) / NS
    if not any(cross):
        return intra
    inter = _inter_s(sim, nbytes)
    V, R = plan.chunks, plan.pp
    hops = R * V - 1
    if hops <= 0:
        return inter
    crossing = V * sum(cross[:-1]) + (V - 1)
    return (crossing * inter + (hops - crossing) * intra) / hops


def blocking_p2p_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> list[float]:
    """Per device, the seconds per micro-batch it spends in blocking pipeline exchanges in the
    steady state; zeros where the plan overlaps them (:func:`overlaps`,
    :attr:`FrameworkComm.p2p_blocking`).

    A blocking exchange (Megatron's ``send_forward_recv_backward`` and ``send_backward_recv_forward``:
    ``batch_isend_irecv``, wait, ``torch.cuda.synchronize()``) holds both neighbours until the transfer
    is done, so the transfer sits between two computes instead of under one. Without virtual stages a
    device exchanges once with each neighbour per micro-batch (after its forward with the next stage,
    after its backward with the previous one): the hops on both sides of it (:func:`p2p_hops_s`; the
    first and last device have one). With V chunks (Megatron's interleaving before
    ``overlap_p2p_comm``) each of its V steps ends in one exchange with both neighbours at once
    (``send_forward_backward_recv_forward_backward``): V times its slower hop."""
    R, V = plan.pp, plan.chunks
    if R <= 1 or overlaps(plan).p2p:
        return [0.0] * R
    h = p2p_hops_s(sim, plan, nbytes)
    if V > 1:
        return [V * max(h[d - 1], h[d]) for d in range(R)]
    return [(h[d - 1] if d > 0 else 0.0) + (h[d] if d < R - 1 else 0.0) for d in range(R)]
