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
(``tests/test_sim_parallel.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.sim.model import NS, SimHardware, StageCosts, to_ns
from stalesim.workloads.memory_llm import StateBytes, state_bytes
from stalesim.workloads.transformer import RECOMPUTE, TransformerSpec, layer_activation_bytes

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import DeviceSpec, Hardware

__all__ = ["KernelEfficiency", "LLMPrediction", "ParallelPlan", "family", "llm_costs", "predict_llm",
           "supported_schedules", "sweep_llm"]

# Closed-form families, read off the schedule's spec (never its name): all forwards then all
# backwards (GPipe), 1F1B with a flush, Megatron's interleaved 1F1B, and the unflushed 1F1B
# orders by how they keep weights (stash: PipeDream; double buffer: 2BW; latest: the
# stale-weights register pipeline).
FILL_DRAIN, ONE_F_ONE_B, INTERLEAVED, STASH, DOUBLE_BUFFER, REGISTER = (
    "fill-drain", "one-f-one-b", "interleaved", "stash", "double-buffer", "register")
# The other flushed orders (zero-bubble ZB-H1/H2/V with their split backward, looped BFS,
# DualPipeV) have no closed form here: one pipeline replica is event-simulated instead.
EVENT = "event"


def family(name: str) -> str | None:
    """The closed-form family of schedule ``name`` (None: no LLM estimate for it)."""
    from stalesim.schedule import Policy, get_spec

    spec = get_spec(name)
    if spec.data_parallel or spec.local_loss or spec.switches:
        return None
    if spec.fast_path in (FILL_DRAIN, ONE_F_ONE_B):
        return spec.fast_path
    if spec.fast_path == "flush":
        # Megatron's order (torch's ScheduleInterleaved1F1B) in closed form; the others simulated
        return INTERLEAVED if spec.torch_name == "ScheduleInterleaved1F1B" else EVENT
    if spec.splits_backward or spec.stages_per_device > 1:  # the periodic closed forms are per stage
        return None
    if spec.policy is Policy.STASH:
        return STASH
    if spec.policy is Policy.DOUBLE_BUFFER:
        return DOUBLE_BUFFER
    if not spec.staleness_free and spec.placement == "contiguous":
        return REGISTER
    return None


def supported_schedules() -> list[str]:
    from stalesim.schedule import schedule_names

    return [n for n in schedule_names() if family(n) is not None]


@dataclass(frozen=True)
class KernelEfficiency:
    """Achievable fraction of peak per kernel type (one set for every prediction).

    Assumptions, chosen once before comparing with any published table and not
    measured here (no GPU was available): ``gemm``, large bf16 GEMMs of
    transformer shape at about 70% of an A100's or H100's dense peak (typical
    cuBLAS figures); ``attention``, the batched score and value products, smaller,
    at about half; ``memory``, element-wise kernels streaming at about 80% of the
    memory bandwidth; ``overhead_s``, the launch and dispatch cost of one kernel
    (about 10 per layer and pass).
    """

    gemm: float = 0.70
    attention: float = 0.50
    memory: float = 0.80
    overhead_s: float = 5e-6

    def to_dict(self) -> dict[str, float]:
        return {"gemm": self.gemm, "attention": self.attention, "memory": self.memory,
                "overhead_s": self.overhead_s}


DEFAULT_EFFICIENCY = KernelEfficiency()
# kernels launched per layer and pass (QKV, scores, softmax, AV, proj, 2 norms, 2 MLP linears, activation)
_KERNELS_PER_LAYER = 10


@dataclass(frozen=True)
class ParallelPlan:
    """How a model is trained: degrees, batch, schedule, recomputation, optimizer state.

    ``global_batch`` sequences per iteration (default ``micro_batch x dp``: one
    micro-batch per replica), split into ``M = global_batch / (dp x micro_batch)``
    micro-batches per replica; ``chunks``: virtual stages per device (``V`` of
    ``interleaved-1f1b``).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None
    schedule: str = "1f1b"
    chunks: int = 1
    sp: bool = False
    recompute: str = "none"
    zero: int = 0
    optimizer: str = "adam"
    precision: str = "mixed"
    error_feedback: bool = False

    @property
    def state(self) -> StateBytes:
        """Training state per parameter, sharded by the plan's ZeRO stage over its ``dp`` ranks."""
        return state_bytes(self.optimizer, self.precision, self.zero, self.dp, error_feedback=self.error_feedback)

    @property
    def full_state(self) -> StateBytes:
        """The same, unsharded (one data-parallel rank's view before ZeRO)."""
        return state_bytes(self.optimizer, self.precision, error_feedback=self.error_feedback)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def batch(self) -> int:
        return self.global_batch if self.global_batch is not None else self.micro_batch * self.dp

    @property
    def microbatches(self) -> int:
        return self.batch // (self.dp * self.micro_batch)

    def check(self, spec: TransformerSpec, node_size: int | None = None) -> None:
        """One-line errors for every combination that cannot apply."""
        from stalesim.limits import check_int

        for f in ("tp", "pp", "dp", "micro_batch", "chunks"):
            check_int(f, getattr(self, f), lo=1)
        if self.global_batch is not None:
            check_int("global_batch", self.global_batch, lo=1)
        from stalesim.schedule import get_spec, schedule_names

        if self.schedule not in schedule_names() or family(self.schedule) is None:
            raise StalesimError(f"schedule: {self.schedule!r} has no LLM estimate "
                                f"(use one of {', '.join(supported_schedules())})")
        fam, spec_s = family(self.schedule), get_spec(self.schedule)
        if self.recompute not in RECOMPUTE:
            raise StalesimError(f"recompute: expected one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        state_bytes(self.optimizer, self.precision, self.zero, self.dp)  # validates those three
        t = self.tp
        if spec.heads % t or spec.n_kv_heads % t and t % spec.n_kv_heads:
            raise StalesimError(f"tp: {t} must divide the {spec.heads} attention heads (and the "
                                f"{spec.n_kv_heads} key/value heads, or be a multiple of them)")
        if node_size is not None and (t > node_size or node_size % t):
            raise StalesimError(f"tp: {t} does not divide the node size {node_size} "
                                f"(tensor parallelism stays inside a node)")
        if self.sp and t == 1:
            raise StalesimError("sp: sequence parallelism needs tp > 1")
        if fam == EVENT and self.chunks != spec_s.stages_per_device:
            raise StalesimError(f"chunks: {self.schedule} runs {spec_s.stages_per_device} stage(s) per device, "
                                f"not {self.chunks}")
        if self.chunks > 1 and fam not in (INTERLEAVED, EVENT):
            raise StalesimError(f"chunks: {self.chunks} virtual stages per device need the interleaved-1f1b "
                                f"schedule, not {self.schedule}")
        stages = self.pp * self.chunks
        if spec.layers % stages:
            raise StalesimError(f"pp: {spec.layers} layers do not split into pp x chunks = {stages} equal stages")
        if self.batch % (self.dp * self.micro_batch):
            raise StalesimError(f"global_batch: {self.batch} is not divisible by dp x micro_batch "
                                f"({self.dp} x {self.micro_batch})")
        M = self.microbatches
        if not spec_s.uses_micro and M != 1:
            raise StalesimError(f"micro_batch: {self.schedule} does not split a batch into micro-batches; "
                                f"give micro_batch = global_batch / dp = {self.batch // self.dp}")
        if fam == INTERLEAVED and M % self.pp:
            raise StalesimError(f"global_batch: interleaved-1f1b needs the {M} micro-batches per replica to "
                                f"be a multiple of pp = {self.pp}")
        if self.zero >= 1 and self.dp == 1:
            raise StalesimError(f"zero: stage {self.zero} shards over the data-parallel ranks; dp = 1 has "
                                f"none to shard over (use zero 0 or dp > 1)")
        if self.zero >= 2 and self.pp > 1:
            raise StalesimError(f"zero: stage {self.zero} shards gradients that a pipeline accumulates over its "
                                f"micro-batches (DeepSpeed refuses it too); use zero <= 1 with pp > 1")
        if self.error_feedback and fam not in (STASH, DOUBLE_BUFFER, REGISTER):
            raise StalesimError(f"error_feedback: corrects stale weights, and {self.schedule} has none "
                                f"(use it with 2bw, pipedream or stale)")
        if self.zero >= 3 and fam in (STASH, DOUBLE_BUFFER):
            raise StalesimError(f"zero: stage 3 shards the live weights, which {self.schedule}'s stashed "
                                f"weight versions cannot be; use zero <= 2")

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "gpus": self.gpus, "micro_batch": self.micro_batch,
                "global_batch": self.batch, "microbatches": self.microbatches, "schedule": self.schedule,
                "chunks": self.chunks, "sp": self.sp, "recompute": self.recompute, "zero": self.zero,
                "optimizer": self.optimizer, "precision": self.precision, "error_feedback": self.error_feedback}


# ---------------------------------------------------------------- per-layer times
@dataclass(frozen=True)
class _Pass:
    gemm: float = 0.0  # FLOPs
    attention: float = 0.0
    mem: float = 0.0  # bytes of element-wise work
    collectives: int = 0  # tensor-parallel collectives of one activation each (all-reduce pairs)

    def __add__(self, o: _Pass) -> _Pass:
        return _Pass(self.gemm + o.gemm, self.attention + o.attention, self.mem + o.mem,
                     self.collectives + o.collectives)

    def scaled(self, k: float) -> _Pass:
        return _Pass(self.gemm * k, self.attention * k, self.mem * k, round(self.collectives * k))


def _layer_forward(spec: TransformerSpec, b: int, t: int, sp: bool) -> _Pass:
    """One layer's forward per tensor-parallel rank: FLOPs and element-wise bytes."""
    e, n = spec.element_bytes, b * spec.seq
    h, f, a, s = spec.hidden, spec.ffn_dim, spec.heads, spec.seq
    outer = 1 / t if sp else 1.0
    # norms (read + write), two residual adds with dropout (read 2, write 1, mask): outside the TP region
    mem = outer * (2 * 2 * e * n * h + 2 * (3 * e * n * h + (n * h if spec.dropout else 0)))
    # activation: GELU reads/writes f; SwiGLU reads gate and up, writes their product
    mem += (2 if spec.ffn_type == "gelu" else 3) * e * n * f / t
    if spec.attention == "unfused":  # scale + mask + softmax (read, write), dropout (read, write, mask)
        mem += (2 * e + (2 * e + 1 if spec.dropout else 0)) * a * s * n / t
    return _Pass(spec.layer_gemm_flops(b) / t, spec.layer_attention_flops(b) / t, mem, 2)


def _head_forward(spec: TransformerSpec, b: int, t: int) -> _Pass:
    """Final norm + vocabulary-parallel logits + cross-entropy (fp32 softmax over V / t)."""
    e, n = spec.element_bytes, b * spec.seq
    mem = 2 * e * n * spec.hidden + 3 * 4 * n * spec.vocab / t
    return _Pass(spec.logits_flops(b) / t, 0.0, mem, 1)


def _embed_forward(spec: TransformerSpec, b: int, t: int) -> _Pass:
    """Vocabulary-parallel embedding: a gather (writes b s h) and one all-reduce of it."""
    return _Pass(0.0, 0.0, 2 * spec.element_bytes * b * spec.seq * spec.hidden, 1 if t > 1 else 0)


def _seconds(p: _Pass, dev: DeviceSpec, dtype: str, eff: KernelEfficiency, coll_s: float, kernels: int) -> float:
    peak = dev.flops_per_s(dtype)
    return (p.gemm / (peak * eff.gemm) + p.attention / (peak * eff.attention)
            + p.mem / (dev.mem_bandwidth_Bps * eff.memory) + p.collectives * coll_s + kernels * eff.overhead_s)


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per micro-batch per GPU: one layer's forward and backward (recomputation included),
    the embedding's and the head's, and one tensor-parallel collective."""

    layer_f: float
    layer_b: float
    embed_f: float
    embed_b: float
    head_f: float
    head_b: float
    collective: float
    # the weight-gradient GEMMs inside layer_b / head_b (W of a split backward; I is the rest)
    layer_w: float = 0.0
    head_w: float = 0.0


def layer_times(spec: TransformerSpec, plan: ParallelPlan, dev: DeviceSpec, hw: SimHardware,
                eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> LayerTimes:
    """Per-GPU seconds of one micro-batch through a layer, the embedding and the head (module doc)."""
    b, t = plan.micro_batch, plan.tp
    act = spec.layer_output_bytes(b)
    coll = hw.allreduce_ns(act, t) / NS if t > 1 else 0.0
    dt = spec.dtype
    fw = _layer_forward(spec, b, t, plan.sp)
    # backward: input and weight gradients (2 x the GEMMs and products), the element-wise work
    # again with gradients (read saved + grad, write grad: 2 x), the same collectives
    bw = _Pass(2 * fw.gemm, 2 * fw.attention, 2 * fw.mem, fw.collectives)
    if plan.recompute == "full":
        bw = bw + fw
    elif plan.recompute == "selective":
        attn_mem = _layer_forward(spec, b, t, plan.sp).mem - _layer_forward(
            replace(spec, attention="flash"), b, t, plan.sp).mem
        bw = bw + _Pass(0.0, fw.attention, attn_mem, 0)
    k = _KERNELS_PER_LAYER
    hf = _head_forward(spec, b, t)
    ef = _embed_forward(spec, b, t)
    return LayerTimes(
        layer_f=_seconds(fw, dev, dt, eff, coll, k),
        layer_b=_seconds(bw, dev, dt, eff, coll, 2 * k + (k if plan.recompute == "full" else 0)),
        embed_f=_seconds(ef, dev, dt, eff, coll, 1), embed_b=_seconds(ef, dev, dt, eff, 0.0, 1),
        head_f=_seconds(hf, dev, dt, eff, coll, 3),
        head_b=_seconds(_Pass(2 * hf.gemm, 0.0, hf.mem, 1), dev, dt, eff, coll, 4),
        collective=coll,
        # W: one GEMM per weight matrix, as many FLOPs as its forward (dL/dW = x^T dy)
        layer_w=_seconds(_Pass(fw.gemm), dev, dt, eff, 0.0, 4 if spec.ffn_type == "gelu" else 5),
        head_w=_seconds(_Pass(hf.gemm), dev, dt, eff, 0.0, 1))


def layer_wgrad_bytes(spec: TransformerSpec, b: int, t: int) -> float:
    """Bytes a deferred weight gradient (W) keeps per layer and rank between its I and W: the
    output gradients of the layer's linears (QKV, output projection, MLP up/gate and down); their
    inputs are saved activations already."""
    h, k, f = spec.hidden, spec.kv_dim, spec.ffn_dim
    widths = (h + 2 * k) + h + (2 if spec.ffn_type == "swiglu" else 1) * f + h
    return spec.element_bytes * b * spec.seq * widths / t


# ---------------------------------------------------------------- stage costs
def rank_hardware(hw: Hardware, tp: int) -> SimHardware:
    """The simulator's hardware with one tensor-parallel group as a device: a node of G GPUs
    holds G / t such devices; links and NICs stay per GPU (each rank moves its 1/t)."""
    sim = SimHardware.from_hardware(hw)
    if sim.cluster is not None:
        G = sim.cluster.node_size
        sim = replace(sim, cluster=replace(sim.cluster, node_size=max(1, G // tp)))
    return sim


def _stage_layers(spec: TransformerSpec, plan: ParallelPlan) -> list[int]:
    S = plan.pp * plan.chunks
    return [spec.layers // S] * S


def llm_costs(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware,
              eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> tuple[StageCosts, SimHardware, LayerTimes]:
    """Per-GPU :class:`StageCosts` of the S = pp x chunks stages and the per-rank hardware."""
    node = hw.cluster.node_size if hw.cluster is not None else None
    plan.check(spec, node)
    sim = rank_hardware(hw, plan.tp)
    lt = layer_times(spec, plan, hw.device, sim, eff)
    per = _stage_layers(spec, plan)
    S = len(per)
    t, b = plan.tp, plan.micro_batch
    sb = plan.full_state
    f = [n * lt.layer_f for n in per]
    bk = [n * lt.layer_b for n in per]
    params = [n * spec.layer_params() / t for n in per]
    f[0] += lt.embed_f
    bk[0] += lt.embed_b
    params[0] += spec.embedding_params() / t
    f[-1] += lt.head_f
    bk[-1] += lt.head_b
    wg = [n * lt.layer_w for n in per]
    wg[-1] += lt.head_w
    head_dw = spec.element_bytes * b * spec.seq * spec.vocab / t  # the logits' gradient the head's W reads
    head = spec.head_params() + (spec.vocab * spec.hidden if spec.tied_embeddings and S > 1 else 0)
    params[-1] += head / t
    act = layer_activation_bytes(spec, b, tp=t, sp=plan.sp, recompute=plan.recompute)
    saved = [n * act for n in per]
    n_tok = b * spec.seq
    saved[-1] += spec.element_bytes * n_tok * spec.hidden + 4 * n_tok * spec.vocab / t  # norm input, fp32 logits
    # update: read and write every state byte of the parameters the rank updates (with ZeRO, its shard)
    shard = plan.dp if plan.zero >= 1 else 1
    upd = [p * 2 * sb.total / shard / (hw.device.mem_bandwidth_Bps * eff.memory) for p in params]
    M = plan.microbatches
    msg = spec.layer_output_bytes(b) // t
    pbytes = tuple(round(p * sb.weights) for p in params)
    seq = sum(M * plan.dp * (x + y) for x, y in zip(f, bk)) + sum(upd)  # the one-device baseline: no ZeRO
    f, bk, wg, end_bytes = _zero_collectives(sim, plan, pbytes, f, bk, wg)
    b_ns, w_ns = tuple(to_ns(x) for x in bk), tuple(to_ns(w) for w in wg)
    costs = StageCosts(
        f_ns=tuple(to_ns(x) for x in f), b_ns=b_ns, u_ns=tuple(to_ns(x) for x in upd),
        loss_ns=0, msg_bytes=(msg,) * S, param_bytes=pbytes, saved_bytes=tuple(round(x) for x in saved),
        bi_ns=tuple(x - w for x, w in zip(b_ns, w_ns)), bw_ns=w_ns,
        wgrad_bytes=tuple(round(n * layer_wgrad_bytes(spec, b, t) + (head_dw if i == S - 1 else 0))
                          for i, n in enumerate(per)),
        allreduce_bytes=end_bytes,
        seq_ns=to_ns(seq * t * plan.pp), batch_size=plan.batch, action_batch=b,
        layer_ranges=tuple((sum(per[:i]), sum(per[:i + 1])) for i in range(S)),
        cost_source={"analytic": {"source": "analytic", "detail": f"{spec.name}: analytic counts, kernel "
                                  f"efficiency {eff.to_dict()} on {hw.device.key or hw.device.name}"}})
    return costs, sim, lt


def sim_options(plan: ParallelPlan) -> Any:
    """The :class:`~stalesim.sim.api.SimOptions` that simulate the plan's :func:`llm_costs` with the
    event engine (small configurations; the closed forms are for the rest): ``dp`` replicas in
    Megatron's rank order, the optimizer state per weight byte, and ZeRO-2/3's gradient and weight
    shards (their communication is in the stage costs)."""
    from stalesim.sim.api import SimOptions

    full, sharded = plan.full_state, plan.state
    return SimOptions(replicas=plan.dp, placement="data", batch_size=plan.batch,
                      optimizer_state_factor=sharded.optimizer / full.weights,
                      gradient_shards=plan.dp if plan.zero >= 2 else 1,
                      weight_shards=plan.dp if plan.zero >= 3 else 1)


def _zero_collectives(sim: SimHardware, plan: ParallelPlan, pbytes: tuple[int, ...], f: list[float],
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
    half = [_dp_allreduce_s(sim, plan, pb // 2) for pb in pbytes]  # one reduce-scatter or all-gather
    bk = [x + c for x, c in zip(bk, half)]
    wg = [x + c for x, c in zip(wg, half)]
    if plan.zero == 2:
        return f, bk, wg, tuple(pb // 2 for pb in pbytes)
    f = [x + c for x, c in zip(f, half)]
    bk = [x + c for x, c in zip(bk, half)]
    return f, bk, wg, (0,) * len(pbytes)


# ---------------------------------------------------------------- closed forms
def _p2p_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """One inter-stage message: the network when a pipeline spans nodes, else the node's link."""
    c = sim.cluster
    # Megatron's rank order (tensor, data, pipeline): a stage's dp ranks are consecutive, so a
    # node of G / t rank groups holds (G / t) / dp stages
    if c is not None and plan.pp * plan.dp > c.node_size:
        return (c.inter_latency_ns + c.serialize_ns(nbytes)) / NS
    return sim.p2p_ns(nbytes) / NS


def _dp_allreduce_s(sim: SimHardware, plan: ParallelPlan, nbytes: int) -> float:
    """A stage's gradient all-reduce over its ``dp`` replicas (Megatron's rank order: tensor,
    then data, then pipeline), hierarchical on a cluster (:meth:`SimHardware.group_allreduce_ns`).
    ZeRO-2/3 move other bytes (:func:`_zero_collectives`)."""
    if plan.dp <= 1 or nbytes <= 0:
        return 0.0
    G = sim.cluster.node_size if sim.cluster is not None else plan.dp
    k = min(plan.dp, G)
    per_node = [k] * (plan.dp // k) + ([plan.dp % k] if plan.dp % k else [])
    return sim.group_allreduce_ns(nbytes, per_node) / NS


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
    fits: bool
    stage_forward_s: list[float]
    stage_backward_s: list[float]
    efficiency: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def summary(self) -> str:
        gb = 1e9
        mb = self.memory_breakdown
        fit = "fits" if self.fits else "DOES NOT FIT"
        parts = ", ".join(f"{k} {v / gb:.1f}" for k, v in mb.items())
        p = self.plan
        return "\n".join([
            f"workload {self.workload}: tp {p['tp']} x pp {p['pp']} x dp {p['dp']} = {p['gpus']} GPUs on "
            f"{self.hardware}; {p['schedule']}, M {p['microbatches']} x micro-batch {p['micro_batch']}, "
            f"recompute {p['recompute']}, sp {'on' if p['sp'] else 'off'}, zero {p['zero']}, "
            f"{p['optimizer']} ({p['precision']})",
            f"iteration time {self.iteration_s:.4g} s (pipeline {self.pipeline_s:.4g} s, exposed data-parallel "
            f"all-reduce {self.dp_allreduce_s:.4g} s, bubble {self.bubble_fraction:.1%})",
            f"throughput {self.tokens_per_s:,.0f} tokens/s; {self.model_tflops_per_gpu:.1f} model TFLOP/s per GPU, "
            f"{self.hardware_tflops_per_gpu:.1f} with recomputation",
            f"memory per GPU (device {self.memory_stage}): {self.memory_bytes / gb:.1f} GB of "
            f"{self.device_memory_bytes / gb:.0f} GB, {fit} (GB: {parts})",
        ])


def predict_llm(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware,
                eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> LLMPrediction:
    """Closed-form iteration time and memory per GPU (module doc)."""
    costs, sim, _lt = llm_costs(spec, plan, hw, eff)
    S, M, V = costs.stages, plan.microbatches, plan.chunks
    R = S // V
    fb = [(f + b) / NS for f, b in zip(costs.f_ns, costs.b_ns)]
    c = _p2p_s(sim, plan, costs.msg_bytes[0]) if S > 1 else 0.0
    ar = [_dp_allreduce_s(sim, plan, p) for p in costs.dp_bytes()]
    u = [x / NS for x in costs.u_ns]
    sched = plan.schedule
    fam = family(sched)
    devices: list[list[int]] = [list(range(d, S, R)) for d in range(R)]  # Megatron's loop placement
    event_acts: list[float] | None = None
    if fam == EVENT:
        pipe, devices, event_acts = event_pipeline(costs, sim, plan)
        # the device that holds stage 0 runs the last backward: its all-reduce is exposed
        d0 = next(i for i, st in enumerate(devices) if 0 in st)
        exposed = _dp_allreduce_s(sim, plan, sum(costs.dp_bytes()[s] for s in devices[d0]))
        it = pipe + exposed  # the simulated flush includes the update
    elif fam in (FILL_DRAIN, ONE_F_ONE_B):
        pipe = sum(fb) + (M - 1) * max(fb) + 2 * (S - 1) * c
        it = pipe + ar[0] + u[0]  # stage 0 finishes its backwards last: its all-reduce is exposed
        exposed = ar[0]
    elif fam == INTERLEAVED:
        work = [sum(fb[d::R]) for d in range(R)]
        # the busiest device's work, plus the fill and drain: R - 1 chunks' F + B (Megatron's
        # bubble, (R - 1)/V of a device's share), at the chunks' mean cost
        pipe = M * max(work) + (R - 1) * sum(fb) / S + 2 * (S - 1) * c
        it = pipe + ar[0] + u[0]
        exposed = ar[0]
    else:
        per = [M * x + y for x, y in zip(fb, u)]
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
    hw_f = spec.model_flops(plan.batch, recompute=plan.recompute)
    # memory per GPU, worst device
    sb = plan.state
    w_unsharded = plan.full_state.weights
    n_params = [p / w_unsharded for p in costs.param_bytes]
    best: dict[str, int] = {}
    best_total, best_dev = -1.0, 0
    for d, stages_d in enumerate(devices):
        comp = dict.fromkeys(("weights", "gradients", "optimizer", "activations", "weight_versions"), 0.0)
        for s in stages_d:
            p = n_params[s]
            versions = weight_versions(sched, S, s)
            grads = 2 if fam == DOUBLE_BUFFER else 1
            comp["weights"] += p * sb.weights
            comp["weight_versions"] += p * sb.version * (versions - 1)
            comp["gradients"] += p * sb.gradients * grads
            comp["optimizer"] += p * sb.optimizer
        comp["activations"] = event_acts[d] if event_acts is not None else _activations(costs, sched, S, M, d, V)
        total = sum(comp.values())
        if total > best_total:
            best_total, best_dev, best = total, d, {k: round(v) for k, v in comp.items()}
    mem_cap = hw.device.memory_bytes
    return LLMPrediction(
        workload=spec.name, plan=plan.to_dict(), hardware=describe(hw), iteration_s=it, pipeline_s=pipe,
        dp_allreduce_s=exposed, bubble_fraction=bubble, tokens_per_s=tokens / it,
        model_tflops_per_gpu=model_f / it / gpus / 1e12, hardware_tflops_per_gpu=hw_f / it / gpus / 1e12,
        memory_bytes=round(best_total), memory_breakdown=best, memory_stage=best_dev,
        device_memory_bytes=mem_cap, fits=best_total <= mem_cap,
        stage_forward_s=[x / NS for x in costs.f_ns], stage_backward_s=[x / NS for x in costs.b_ns],
        efficiency=eff.to_dict())


def event_pipeline(costs: StageCosts, sim: SimHardware, plan: ParallelPlan) -> tuple[float, list[list[int]],
                                                                                  list[float]]:
    """One pipeline replica of ``plan.schedule`` through the event simulator: the flushed
    iteration's seconds (update included, no data-parallel all-reduce), the stages of each
    device, and each device's peak activation bytes (in flight + deferred weight gradients).

    The pipeline's messages go over the network when the pipeline spans nodes (Megatron's
    rank order, as :func:`_p2p_s` decides), else over the node's link."""
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.sim.api import SimOptions, simulate

    S, V = costs.stages, plan.chunks
    c = sim.cluster
    pipe_hw = replace(sim, cluster=None)
    if c is not None and plan.pp * plan.dp > c.node_size:
        pipe_hw = replace(pipe_hw, link=c.inter_link, latency_ns=c.inter_latency_ns,
                          bandwidth_Bps=c.inter_bandwidth_Bps)
    sched = build_schedule(ScheduleConfig(plan.schedule, stages=S, microbatches=plan.microbatches,
                                          stages_per_device=V if V > 1 else None))
    r = simulate(costs, sched, pipe_hw, SimOptions(keep_timeline=False))
    devices = [[s for _w, s in sched.stages_on(d)] for d in range(sched.num_devices)]
    acts = [float(b["activations"] + b["deferred_w"]) for b in r.memory_breakdown]
    return r.iteration_time_s, devices, acts


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


def _activations(costs: StageCosts, sched: str, S: int, M: int, d: int, V: int) -> float:
    """Activation bytes device ``d`` holds at its peak: in-flight micro-batches x its stages' saved
    bytes (with chunks, the device's in-flight chunk micro-batches spread over its chunks)."""
    R = S // V
    if V == 1:
        return costs.saved_bytes[d] * in_flight(sched, S, M, d)
    per_chunk = max(costs.saved_bytes[s] for s in range(d, S, R))
    return per_chunk * in_flight(sched, S, M, d, V)

