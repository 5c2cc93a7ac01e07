"""How an analytic transformer is trained: degrees, batch, schedule family, recomputation, training state.

:class:`ParallelPlan` is the input every LLM-scale estimate reads
(:mod:`stalesim.sim.llm_costs`, :mod:`stalesim.sim.parallel`), and
:func:`family` the closed-form family of a schedule, read off its spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stalesim.errors import StalesimError
from stalesim.workloads.memory_llm import StateBytes, framework_state, state_bytes
from stalesim.workloads.transformer import RECOMPUTE, TransformerSpec

__all__ = ["FRAMEWORKS", "DOUBLE_BUFFER", "EVENT", "FILL_DRAIN", "INTERLEAVED", "ONE_F_ONE_B", "REGISTER", "STASH",
           "ParallelPlan", "family", "supported_schedules"]

# Training frameworks whose conventions change memory and overlap (each rule is documented where
# its mechanism lives: stalesim.workloads.memory_llm for the training state per parameter,
# stalesim.sim.llm_memory for the rest of memory, stalesim.sim.llm_comm for overlap):
# Megatron-LM without / with its distributed optimizer, DeepSpeed (ZeRO stages, bf16 optimizer),
# PyTorch FSDP2 (``zero`` 3: reshard after forward, 2: keep the gathered weights, 0: torchtitan's
# default, 3 without a pipeline and 2 with one).
# ``deepspeed-2021``: DeepSpeed ZeRO as released in 2021 (v0.3.13 to v0.5), what SC21 compared with:
# the same memory rules, its own collectives and overlap defaults (stalesim.sim.llm_comm)
FRAMEWORKS = ("megatron", "megatron-distopt", "deepspeed", "deepspeed-2021", "fsdp2")

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
    # the recomputation applies to every N-th layer, the others keep everything (torchtitan's
    # ``selective_ac_option = "N"`` with ``full``: every N-th block checkpointed whole)
    recompute_every: int = 1
    zero: int = 0
    optimizer: str = "adam"
    precision: str = "mixed"
    error_feedback: bool = False
    # whose conventions decide the memory terms and the default overlaps (FRAMEWORKS)
    framework: str = "megatron"
    # context parallelism: the sequence split over ``cp`` ranks (ring attention)
    cp: int = 1
    # layers per pipeline stage (pp x chunks entries, summing to the model's layers); None: even split
    stage_layers: tuple[int, ...] | None = None
    # overlap per mechanism; None: what ``framework`` does
    tp_overlap: bool | None = None
    dp_overlap: bool | None = None
    zero_prefetch: bool | None = None
    # pipeline (P2P) transfers overlapped with compute; False: each exchange blocks both devices until
    # its transfer is done (stalesim.sim.llm_comm: FrameworkComm.p2p_blocking); None: the framework's
    p2p_overlap: bool | None = None
    # the automatic zero-bubble scheduler's limit on micro-batches pending their W per stage (the
    # zero-bubble fork's --zero-bubble-max-pending-backward: pp for ZB-1p, 2 pp for ZB-2p); None: the
    # schedule's own order decides its memory (stalesim.sim.parallel: pending_limit_activations)
    pending_limit: int | None = None

    @property
    def state(self) -> StateBytes:
        """Training state per parameter, sharded by the plan's ZeRO stage over its ``dp`` ranks."""
        return state_bytes(self.optimizer, self.precision, self.zero, self.dp, error_feedback=self.error_feedback)

    @property
    def full_state(self) -> StateBytes:
        """The same, unsharded (one data-parallel rank's view before ZeRO)."""
        return state_bytes(self.optimizer, self.precision, error_feedback=self.error_feedback)

    @property
    def recomputed_share(self) -> float:
        """The share of layers the recomputation applies to (``1 / recompute_every``): per-layer
        costs average over it, exact when each stage's layer count is a multiple of N."""
        return 1.0 / self.recompute_every

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

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
        check_int("recompute_every", self.recompute_every, lo=1)
        if self.recompute_every > 1 and self.recompute == "none":
            raise StalesimError(f"recompute_every: {self.recompute_every} needs a recomputation other than none")
        state_bytes(self.optimizer, self.precision, self.zero, self.dp)  # validates those three
        if self.framework not in FRAMEWORKS:
            raise StalesimError(f"framework: expected one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        framework_state(self.framework, self.optimizer, self.precision, self.zero, self.dp)  # its ZeRO stages
        check_int("cp", self.cp, lo=1)
        for f in ("tp_overlap", "dp_overlap", "zero_prefetch", "p2p_overlap"):
            if getattr(self, f) not in (None, True, False):
                raise StalesimError(f"{f}: expected true, false or none (the framework's), got {getattr(self, f)!r}")
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
        if self.pending_limit is not None:
            check_int("pending_limit", self.pending_limit, lo=1)
            if not spec_s.splits_backward or spec_s.stages_per_device != 1:
                raise StalesimError(f"pending_limit: bounds the pending W of an automatic zero-bubble schedule, "
                                    f"one stage per device with a split backward (zb-h1, zb-h2), not "
                                    f"{self.schedule}")
        self._check_split(spec)
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
        if self.zero >= 2 and self.pp > 1 and self.framework != "fsdp2":
            # DeepSpeed's PipelineEngine asserts ZeRO < 2 (deepspeed/runtime/pipe/engine.py) and
            # Megatron-LM pairs pipelines with its distributed optimizer; torchtitan runs FSDP2 with
            # pipelines (it accumulates the unsharded gradients: stalesim.workloads.memory_llm)
            raise StalesimError(f"zero: stage {self.zero} shards gradients that a pipeline accumulates over its "
                                f"micro-batches ({self.framework} refuses it); use zero <= 1 with pp > 1, "
                                f"or framework fsdp2")
        if self.error_feedback and fam not in (STASH, DOUBLE_BUFFER, REGISTER):
            raise StalesimError(f"error_feedback: corrects stale weights, and {self.schedule} has none "
                                f"(use it with 2bw, pipedream or stale)")
        if self.zero >= 3 and fam in (STASH, DOUBLE_BUFFER):
            raise StalesimError(f"zero: stage 3 shards the live weights, which {self.schedule}'s stashed "
                                f"weight versions cannot be; use zero <= 2")

    def _check_split(self, spec: TransformerSpec) -> None:
        """The layers over the pp x chunks stages and the sequence over the cp ranks."""
        from stalesim.limits import check_int

        stages = self.pp * self.chunks
        if self.stage_layers is not None:
            sl = self.stage_layers
            if len(sl) != stages:
                raise StalesimError(f"stage_layers: {len(sl)} entries for pp x chunks = {stages} stages")
            # the first and last stage may hold no layer, only the embedding or the head: Megatron-LM's
            # layer padding (the zero-bubble fork's --allow-padding-num-layers) empties the first and
            # last model chunk when one layer per virtual stage does not divide evenly
            for i, n in enumerate(sl):
                check_int("stage_layers", n, lo=0 if i in (0, stages - 1) and stages > 1 else 1)
            if sum(sl) != spec.layers:
                raise StalesimError(f"stage_layers: {'+'.join(map(str, sl))} = {sum(sl)} layers, "
                                    f"the model has {spec.layers}")
        elif spec.layers % stages:
            raise StalesimError(f"pp: {spec.layers} layers do not split into pp x chunks = {stages} equal stages "
                                f"(give stage_layers: a list, or first-last)")
        # Megatron-LM's causal load balancing cuts the sequence into 2 x cp chunks, each rank taking one
        # from each end (get_batch_on_this_cp_rank, megatron/training/utils.py), so 2 x cp divides it
        if self.cp > 1 and spec.seq % (2 * self.cp):
            raise StalesimError(f"cp: sequence {spec.seq} does not split into 2 x cp = {2 * self.cp} equal chunks")

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "gpus": self.gpus, "micro_batch": self.micro_batch,
                "global_batch": self.batch, "microbatches": self.microbatches, "schedule": self.schedule,
                "chunks": self.chunks, "sp": self.sp, "recompute": self.recompute,
                "recompute_every": self.recompute_every, "zero": self.zero, "optimizer": self.optimizer,
                "precision": self.precision, "error_feedback": self.error_feedback,
                "framework": self.framework, "cp": self.cp,
                "stage_layers": list(self.stage_layers) if self.stage_layers is not None else None,
                "tp_overlap": self.tp_overlap, "dp_overlap": self.dp_overlap, "zero_prefetch": self.zero_prefetch,
                "p2p_overlap": self.p2p_overlap, "pending_limit": self.pending_limit}
