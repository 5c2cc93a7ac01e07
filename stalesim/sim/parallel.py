"""LLM-scale pipelines: tensor, sequence, pipeline and data parallelism, recomputation, ZeRO, in a second.

:func:`llm_costs` turns an analytic transformer
(:mod:`stalesim.workloads.transformer`) and a :class:`ParallelPlan` into the
simulator's own inputs, per GPU: :class:`~stalesim.sim.model.StageCosts` (one
stage = ``layers / pp`` layers, the embedding on the first, the head on the
last) and a :class:`~stalesim.sim.model.SimHardware` whose "device" is one
tensor-parallel rank. The transforms, per stage:

* **Tensor parallelism** ``t``: a layer's GEMM and attention FLOPs, its weights
  and the activations inside the parallel region are divided by ``t``
  (Shoeybi et al. 2019); each layer adds 2 all-reduces of ``b s h`` activations
  in the forward and 2 in the backward on the intra-node link (ring), or with
  **sequence parallelism** 2 all-gathers + 2 reduce-scatters each way (the same
  bytes; Korthikanti et al. 2022), which also divides the norms' and dropouts'
  work and memory by ``t``. ``t`` must divide the node size (TP stays in a node).
  A node of G GPUs is G / t simulator devices; the pipeline's messages are
  ``b s h / t`` per rank (Megatron's scatter/gather) and each rank all-reduces
  its own 1/t of the gradients over its own NIC.
* **Recomputation**: ``full`` re-runs each layer's forward (its all-reduces
  included) before its backward and keeps only the layer input; ``selective``
  re-runs the attention core (QK^T, softmax, dropout, AV) and drops the score
  activations (Korthikanti et al. 2022, section 5).
* **Optimizer state and ZeRO** (:mod:`stalesim.workloads.memory_llm`): bytes per
  parameter by optimizer and precision, sharded over ``dp`` by ZeRO stage;
  the asynchronous schedules' extra weight versions at the weight precision.

Times per GPU and kernel type (:class:`KernelEfficiency`, stated once, never
per configuration): GEMM FLOPs at ``gemm`` x peak, attention score/value
products at ``attention`` x peak, element-wise work (norms, GELU/SwiGLU,
softmax, dropout, residual adds, the loss) at ``memory`` x memory bandwidth by
the bytes it reads and writes; tensor-parallel collectives are not overlapped
with compute (Megatron-LM's behaviour in the papers checked here).

:func:`predict_llm` answers from closed forms over those costs (a 64-stage,
512-micro-batch pipeline would be millions of events): iteration time per
schedule family, memory per GPU broken into weights, gradients, optimizer state,
activations and extra weight versions, and whether it fits. The closed forms are
checked against the event simulation on small configurations
(``tests/unit/test_sim_parallel.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.sim.llm_capacity import visible_bytes
from stalesim.sim.llm_comm import blocking_p2p_s, dp_sync_s, p2p_s
from stalesim.sim.llm_costs import llm_costs, sim_options
from stalesim.sim.llm_kernels import DEFAULT_EFFICIENCY, KernelEfficiency
from stalesim.sim.llm_memory import device_memory, in_flight, weight_versions
from stalesim.sim.llm_plan import (
    DOUBLE_BUFFER,
    EVENT,
    FILL_DRAIN,
    INTERLEAVED,
    ONE_F_ONE_B,
    ParallelPlan,
    family,
    supported_schedules,
)
from stalesim.sim.model import NS, SimHardware, StageCosts
from stalesim.workloads.transformer import TransformerSpec

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import Hardware

# the LLM estimate's public names, defined in the llm_* modules and gathered here
__all__ = ["KernelEfficiency", "LLMPrediction", "ParallelPlan", "event_pipeline", "family", "in_flight",
           "interleaved_pipeline_s", "flushed_pipeline_s", "pending_limit_activations",
           "llm_costs", "predict_llm", "sim_options", "supported_schedules", "sweep_llm", "weight_versions"]


@dataclass
class LLMPrediction:
    """Iteration time, throughput and memory per GPU of one plan."""

    workload: str
    plan: dict[str, Any]
    hardware: str
    iteration_s: float
    pipeline_s: float
    dp_allreduce_s: float
    bubble_fraction: float
    tokens_per_s: float
    model_tflops_per_gpu: float  # 6N-style model FLOPs (no recomputation) per GPU
    hardware_tflops_per_gpu: float  # with the recomputed work (Narayanan et al.'s Table 1 metric)
    memory_bytes: int  # the worst GPU's
    memory_breakdown: dict[str, int]
    memory_stage: int
    device_memory_bytes: float
    fits: bool  # the point estimate within the device's memory
    stage_forward_s: list[float]
    stage_backward_s: list[float]
    efficiency: dict[str, float] = field(default_factory=dict)
    # the point's range (stalesim.sim.llm_memory): without the transient working sets, with the
    # allocator's reserve at its upper end; 0 when not estimated
    memory_low_bytes: int = 0
    memory_high_bytes: int = 0
    # ``fits``: memory_bytes + the bytes held outside the allocator (CUDA context, NCCL buffers) within
    # the capacity the CUDA runtime reports (stalesim.sim.llm_capacity; ``device_memory_bytes`` is the
    # catalog's datasheet figure); empty / 0 when not estimated
    memory_outside_allocator: dict[str, int] = field(default_factory=dict)
    memory_capacity_bytes: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def summary(self) -> str:
        gb = 1e9
        mb = self.memory_breakdown
        cap = self.memory_capacity_bytes or self.device_memory_bytes
        outside = self.memory_outside_allocator
        fit = ("DOES NOT FIT" if not self.fits else
               "may not fit" if self.memory_high_bytes + sum(outside.values()) > cap else "fits")
        held = ", ".join(f"{k} {v / gb:.1f}" for k, v in outside.items())
        parts = ", ".join(f"{k} {v / gb:.1f}" for k, v in mb.items())
        p = self.plan
        return "\n".join([
            f"workload {self.workload}: tp {p['tp']} x pp {p['pp']} x dp {p['dp']} = {p['gpus']} GPUs on "
            f"{self.hardware}; {p['schedule']}, M {p['microbatches']} x micro-batch {p['micro_batch']}, "
            f"recompute {p['recompute']}"
            f"{' every ' + str(p['recompute_every']) + ' layers' if p['recompute_every'] > 1 else ''}, "
            f"sp {'on' if p['sp'] else 'off'}, zero {p['zero']}, "
            f"{p['optimizer']} ({p['precision']})",
            f"iteration time {self.iteration_s:.4g} s (pipeline {self.pipeline_s:.4g} s, exposed data-parallel "
            f"all-reduce {self.dp_allreduce_s:.4g} s, bubble {self.bubble_fraction:.1%})",
            f"throughput {self.tokens_per_s:,.0f} tokens/s; {self.model_tflops_per_gpu:.1f} model TFLOP/s per GPU, "
            f"{self.hardware_tflops_per_gpu:.1f} with recomputation",
            f"memory per GPU (device {self.memory_stage}): {self.memory_bytes / gb:.1f} GB "
            f"({self.memory_low_bytes / gb:.1f} to {self.memory_high_bytes / gb:.1f}) of "
            f"{self.device_memory_bytes / gb:.0f} GB, {fit} (GB: {parts})"
            + (f"; besides, outside the allocator: {held} GB, against the {cap / gb:.1f} GB the CUDA runtime "
               f"reports" if outside else ""),
        ])


def predict_llm(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware,
                eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> LLMPrediction:
    """Closed-form iteration time and memory per GPU (module doc)."""
    costs, sim, _lt = llm_costs(spec, plan, hw, eff)
    S, M, V = costs.stages, plan.microbatches, plan.chunks
    R = S // V
    fb = [(f + b) / NS for f, b in zip(costs.f_ns, costs.b_ns)]
    c = p2p_s(sim, plan, costs.msg_bytes[0]) if S > 1 else 0.0
    # blocking pipeline exchanges: seconds per micro-batch per device (zeros when overlapped)
    held = blocking_p2p_s(sim, plan, costs.msg_bytes[0]) if S > 1 else [0.0] * R
    u = [x / NS for x in costs.u_ns]
    bk = [x / NS for x in costs.b_ns]

    def sync(stages: list[int]) -> float:
        """The end-of-batch gradient synchronisation of a device holding ``stages`` (one model
        chunk each), exposed after its last backward (:func:`dp_sync_s`)."""
        return dp_sync_s(sim, plan, [costs.param_bytes[s] for s in stages], sum(bk[s] for s in stages))

    sched = plan.schedule
    fam = family(sched)
    devices: list[list[int]] = [list(range(d, S, R)) for d in range(R)]  # Megatron's loop placement
    event_acts: list[float] | None = None
    if fam == EVENT:
        pipe, devices, event_acts = event_pipeline(costs, sim, plan)
        if plan.pending_limit is not None:
            event_acts = pending_limit_activations(costs, devices, plan.pending_limit, M)
        # the device that holds stage 0 runs the last backward: its synchronisation is exposed
        d0 = next(i for i, st in enumerate(devices) if 0 in st)
        exposed = sync(devices[d0])
        it = pipe + exposed  # the simulated flush includes the update
    elif fam in (FILL_DRAIN, ONE_F_ONE_B):
        pipe = flushed_pipeline_s(fb, M, c, held, round_trip=fam == ONE_F_ONE_B)
        exposed = sync([0])  # stage 0 finishes its backwards last: its synchronisation is exposed
        it = pipe + exposed + u[0]
    elif fam == INTERLEAVED:
        pipe = interleaved_pipeline_s([f / NS for f in costs.f_ns], bk, R, M, c, held)
        # device 0 (stages 0, R, 2R, ...) runs the last backward: all its chunks' gradients are
        # synchronised and updated after it
        exposed = sync(devices[0])
        it = pipe + exposed + sum(u[s] for s in devices[0])
    else:
        ar = [sync([s]) for s in range(S)]
        per = [M * (t + y) + z for t, y, z in zip(fb, held, u)]
        pipe = max(per)
        if fam == DOUBLE_BUFFER:  # the all-reduce overlaps the next batch's micro-batches
            it = max(max(p, a) for p, a in zip(per, ar))
        else:  # pipedream / stale: each stage's update waits for its all-reduce
            it = max(p + a for p, a in zip(per, ar))
        exposed = it - pipe
    ideal = M * max(sum(fb[s] for s in st) for st in devices)  # the busiest device's work
    bubble = max(0.0, 1 - ideal / pipe) if pipe > 0 else 0.0
    tokens = plan.batch * spec.seq
    gpus = plan.gpus
    model_f = spec.model_flops(plan.batch)
    hw_f = spec.model_flops(plan.batch, recompute=plan.recompute, every=plan.recompute_every)
    mem = device_memory(costs, plan, devices, event_acts, spec=spec, device=hw.device)
    mem_cap = visible_bytes(hw.device)
    return LLMPrediction(
        workload=spec.name, plan=plan.to_dict(), hardware=describe(hw), iteration_s=it, pipeline_s=pipe,
        dp_allreduce_s=exposed, bubble_fraction=bubble, tokens_per_s=tokens / it,
        model_tflops_per_gpu=model_f / it / gpus / 1e12, hardware_tflops_per_gpu=hw_f / it / gpus / 1e12,
        memory_bytes=mem.total, memory_breakdown=mem.breakdown, memory_stage=mem.device,
        device_memory_bytes=hw.device.memory_bytes, fits=mem.total + sum(mem.outside.values()) <= mem_cap,
        memory_outside_allocator=mem.outside, memory_capacity_bytes=mem_cap,
        stage_forward_s=[x / NS for x in costs.f_ns], stage_backward_s=[x / NS for x in costs.b_ns],
        efficiency=eff.to_dict(), memory_low_bytes=mem.low, memory_high_bytes=mem.high)


def flushed_pipeline_s(fb: list[float], M: int, c: float, blocking: list[float] | None = None, *,
                       round_trip: bool = True) -> float:
    """GPipe or 1F1B over ``S`` stages of ``fb[s]`` seconds (forward + backward) per micro-batch,
    ``M`` micro-batches, inter-stage message ``c`` seconds, ``blocking`` per stage the seconds per
    micro-batch of exchanges it waits for (None: they overlap): the flush's seconds.

    Fill and drain: one micro-batch's path through every stage and back, ``sum(fb) + 2 (S - 1) c``;
    then each of the other ``M - 1`` micro-batches at the steady period: the busiest stage's
    work, and, in 1F1B (``round_trip``), each stage's round trip. Stage s starts a micro-batch's
    forward only after the backward of the one ``S - s`` before it (its warm-up depth), and that
    backward comes back through every later stage and 2 (S - 1 - s) messages, so the period is at
    least ``(sum_{j >= s} fb[j] + 2 (S - 1 - s) c) / (S - s)``: on a link slow against a stage's
    compute the round trip, not the busiest stage, sets the pace (the same bound as the
    asynchronous schedules' in :mod:`stalesim.sim.fastpath`; its exact 1F1B replay agrees within
    about 2 %, where the busiest-stage period alone was up to 20 % fast). GPipe runs all forwards
    before any backward, so no such cycle bounds it."""
    S = len(fb)
    x = blocking if blocking is not None else [0.0] * S
    period = max(t + y for t, y in zip(fb, x))
    if round_trip:
        period = max(period, max((sum(fb[s:]) + 2 * (S - 1 - s) * c) / (S - s) for s in range(S)))
    return sum(fb) + (M - 1) * period + 2 * (S - 1) * c


def interleaved_pipeline_s(f: list[float], b: list[float], R: int, M: int, c: float,
                           blocking: list[float] | None = None) -> float:
    """Megatron's interleaved 1F1B over ``S = R V`` stages on ``R`` devices (stage s on device
    s mod R), ``M`` micro-batches, inter-stage message ``c`` seconds, ``blocking`` per device the
    seconds per micro-batch of exchanges it waits for between its computes
    (:func:`~stalesim.sim.llm_comm.blocking_p2p_s`; None: they overlap): the flush's seconds.

    Fill and drain: R - 1 chunks' F + B at the chunks' mean cost (Megatron's bubble, (R - 1) / V of
    a device's share) and the 2 (S - 1) messages of the first forward and the last backward. The
    steady phase: each device alternates one chunk's forward and another's backward, and every
    chunk's output goes to the next device every micro-batch. In the steady state device d's k-th
    forward starts a fixed offset after device d - 1's (it needs that forward's output: offset >=
    f + c) and the forward of chunk v + 1 on device 0 comes R forwards after chunk v's, once the
    activation went round all R devices; the backward chain runs the other way. Both loops give
    a period per micro-batch of at least ``sum_s (max(f_s, b_s) + c) / R`` besides the busiest
    device's work ``sum_{s on d} (f_s + b_s)``: the transfers are hidden while every chunk's
    compute outlasts a message, and charged once they do not. The first R micro-batches only fill
    (no steady state yet), so the loop bound applies to the other M - R. Blocking exchanges add to
    every micro-batch's work."""
    S = len(f)
    fb = [x + y for x, y in zip(f, b)]
    x = blocking if blocking is not None else [0.0] * R
    work = max(sum(fb[d::R]) + x[d] for d in range(R))
    loop = sum(max(x, y) + c for x, y in zip(f, b)) / R
    first = min(M, R)
    return first * work + (M - first) * max(work, loop) + (R - 1) * sum(fb) / S + 2 * (S - 1) * c


#: batches the event simulation of one LLM pipeline replica runs (:func:`event_pipeline`)
FLUSHED_BATCHES = 3


def event_pipeline(costs: StageCosts, sim: SimHardware, plan: ParallelPlan) -> tuple[float, list[list[int]],
                                                                                  list[float]]:
    """One pipeline replica of ``plan.schedule`` through the event simulator: the flushed
    iteration's seconds (update included, no data-parallel all-reduce), the stages of each
    device, and each device's peak activation bytes (in flight + deferred weight gradients).

    The pipeline's messages go over the network when the pipeline spans nodes (Megatron's
    rank order, as :func:`~stalesim.sim.llm_comm.p2p_hops_s` decides), else over the node's link;
    where the plan does not overlap them (:func:`~stalesim.sim.llm_comm.overlaps`), each send holds
    its device for its transfer."""
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.schedule.actions import Kind
    from stalesim.sim.api import SimOptions, simulate
    from stalesim.sim.llm_comm import overlaps

    S, V = costs.stages, plan.chunks
    c = sim.cluster
    pipe_hw = replace(sim, cluster=None)
    if c is not None and plan.pp * plan.dp > c.node_size:
        pipe_hw = replace(pipe_hw, link=c.inter_link, latency_ns=c.inter_latency_ns,
                          bandwidth_Bps=c.inter_bandwidth_Bps)
    # a flushed schedule repeats itself from its second batch on: three batches give the steady
    # window two whole periods after the first (the default eight took 2.7x as long, same result)
    sched = build_schedule(ScheduleConfig(plan.schedule, stages=S, microbatches=plan.microbatches,
                                          stages_per_device=V if V > 1 else None, batches=FLUSHED_BATCHES))
    if not overlaps(plan).p2p:
        # a blocking send holds its device until the transfer is done (blocking_p2p_s in closed form)
        held = tuple(pipe_hw.p2p_ns(b) for b in costs.msg_bytes)
        costs = replace(costs, gap_ns=costs.gap_ns + tuple((k.value, held) for k in (Kind.SEND_F, Kind.SEND_B)))
    r = simulate(costs, sched, pipe_hw, SimOptions(keep_timeline=False))
    devices = [[s for _w, s in sched.stages_on(d)] for d in range(sched.num_devices)]
    acts = [float(b["activations"] + b["deferred_w"]) for b in r.memory_breakdown]
    return r.iteration_time_s, devices, acts


def pending_limit_activations(costs: StageCosts, devices: list[list[int]], limit: int, M: int) -> list[float]:
    """Peak activation bytes per device under the automatic zero-bubble scheduler's memory limit:
    ``min(limit, M)`` whole micro-batch records of the device's heaviest stage.

    The scheduler (Qi et al., ICLR 2024, section 3.1) schedules as many forwards as the limit
    allows in the warm-up, to shrink the bubble before the first B, and inserts a W to free memory
    whenever the limit is hit, so a stage's pending micro-batches (forward done, W not yet) stay
    at the limit from the warm-up to the drain. At the end of the warm-up they are all whole
    (no B has run there yet): exact for the first stage, whose warm-up the limit bounds when it is at
    most ``((p - 1)(T_B + 2 T_comm) + p T_F) / T_F`` forwards (Appendix B), and an upper bound for
    the later stages, whose warm-up may hold one forward fewer per stage, the difference already
    reduced to W's inputs. The handcrafted orders (ZB-H1, ZB-H2) the event simulation runs hold
    fewer on the later stages, which is why the published ZB-1p / ZB-2p memory sits above them."""
    n = min(limit, M)
    return [float(max(n * costs.saved_bytes[s] for s in stages)) for stages in devices]


def describe(hw: Hardware) -> str:
    """The cluster in words (per GPU, not per tensor-parallel group)."""
    dev = hw.device.key or hw.device.name
    c = hw.cluster
    link = hw.link.key or hw.link.name
    if c is None:
        return f"{dev} GPUs on one node ({link})"
    return (f"nodes of {c.node_size} x {dev} ({c.intra_link.key or c.intra_link.name} inside a node, "
            f"{c.inter_link.key or c.inter_link.name} per GPU between nodes)")


SWEEP_COLUMNS = ("rank", "schedule", "tp", "pp", "dp", "gpus", "microbatches", "recompute", "zero", "iteration_s",
                 "tokens_per_s", "model_tflops_per_gpu", "memory_gb", "fits", "error")


def sweep_llm(spec: TransformerSpec, plans: list[ParallelPlan], hw: Hardware,
              eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> list[dict[str, Any]]:
    """One row per plan, ranked: configurations that fit by throughput, then those that do not,
    then the ones that cannot apply (with their one-line error)."""
    rows: list[dict[str, Any]] = []
    for plan in plans:
        row: dict[str, Any] = dict.fromkeys(SWEEP_COLUMNS)
        row.update(schedule=plan.schedule, tp=plan.tp, pp=plan.pp, dp=plan.dp, gpus=plan.gpus,
                   recompute=plan.recompute, zero=plan.zero)
        try:
            p = predict_llm(spec, plan, hw, eff)
        except StalesimError as exc:
            row["error"] = str(exc)
            rows.append(row)
            continue
        row.update(microbatches=plan.microbatches, iteration_s=p.iteration_s, tokens_per_s=p.tokens_per_s,
                   model_tflops_per_gpu=p.model_tflops_per_gpu, memory_gb=p.memory_bytes / 1e9, fits=p.fits,
                   **{f"{k}_gb": v / 1e9 for k, v in p.memory_breakdown.items()})
        rows.append(row)
    rows.sort(key=lambda r: (r["error"] is not None, not r["fits"], -(r["tokens_per_s"] or 0)))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows
