"""An analytic transformer and a :class:`~stalesim.sim.llm_plan.ParallelPlan` as the simulator's inputs per GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.sim.llm_comm import rank_hardware, zero_collectives
from stalesim.sim.llm_kernels import (
    DEFAULT_EFFICIENCY,
    KernelEfficiency,
    LayerTimes,
    layer_gemms,
    layer_times,
    layer_w_input_bytes,
    layer_wgrad_bytes,
)
from stalesim.sim.llm_plan import ParallelPlan
from stalesim.sim.model import SimHardware, StageCosts, to_ns
from stalesim.workloads.transformer import TransformerSpec, layer_activation_bytes

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.hardware import Hardware

__all__ = ["first_last_layers", "llm_costs", "sim_options", "stage_layers"]


def stage_layers(spec: TransformerSpec, plan: ParallelPlan) -> list[int]:
    """Layers of each of the pp x chunks stages (in stage order: with chunks, stage ``s`` runs on
    device ``s mod pp``): ``plan.stage_layers`` when given, else the even split."""
    if plan.stage_layers is not None:
        return list(plan.stage_layers)
    S = plan.pp * plan.chunks
    return [spec.layers // S] * S


def first_last_layers(layers: int, stages: int) -> tuple[int, ...]:
    """One layer fewer on the first and the last stage: the embedding and the loss each counted
    as a layer, as Megatron-LM's ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split`` do (the ``layers + 2`` slots split evenly; the same
    split ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` or
    torchtitan's per-stage layer lists give by hand), e.g. Llama-3.1-405B's 126 layers on 16
    stages: 7, 8 x 14, 7. One stage keeps every layer."""
    from stalesim.limits import check_int

    check_int("stage_layers", layers, lo=1)
    check_int("stage_layers", stages, lo=1)
    if stages == 1:
        return (layers,)
    if (layers + 2) % stages or (layers + 2) // stages < 2:
        raise StalesimError(f"stage_layers: first-last needs layers + 2 = {layers + 2} to split into "
                            f"{stages} equal stages of at least 2 (give the list instead)")
    n = (layers + 2) // stages
    return (n - 1,) + (n,) * (stages - 2) + (n - 1,)


def llm_costs(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware,
              eff: KernelEfficiency = DEFAULT_EFFICIENCY) -> tuple[StageCosts, SimHardware, LayerTimes]:
    """Per-GPU :class:`StageCosts` of the S = pp x chunks stages and the per-rank hardware."""
    node = hw.cluster.node_size if hw.cluster is not None else None
    plan.check(spec, node)
    sim = rank_hardware(hw, plan.tp)
    lt = layer_times(spec, plan, hw.device, sim, eff)
    per = stage_layers(spec, plan)
    S = len(per)
    t, b = plan.tp, plan.micro_batch
    # context parallelism: each rank holds s / cp of every sequence, so its activations, messages and
    # logits are 1 / cp of a sequence's (the per-layer time, K/V ring included, is layer_times')
    cp = plan.cp
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
    head_dw = spec.element_bytes * b * spec.seq * spec.vocab / t / cp  # the logits' gradient the head's W reads
    head = spec.head_params() + (spec.vocab * spec.hidden if spec.tied_embeddings and S > 1 else 0)
    params[-1] += head / t
    act = plan.recomputed_share * layer_activation_bytes(spec, b, tp=t, sp=plan.sp, recompute=plan.recompute, cp=cp)
    if plan.recompute_every > 1:  # the layers between the recomputed ones keep everything
        act += (1 - plan.recomputed_share) * layer_activation_bytes(spec, b, tp=t, sp=plan.sp, cp=cp)
    saved = [n * act for n in per]
    n_tok = b * spec.seq / cp
    saved[-1] += spec.element_bytes * n_tok * spec.hidden + 4 * n_tok * spec.vocab / t  # norm input, fp32 logits
    # update: read and write every state byte of the parameters the rank updates (with ZeRO, its shard)
    shard = plan.dp if plan.zero >= 1 else 1
    upd = [p * 2 * sb.total / shard / (hw.device.mem_bandwidth_Bps * eff.memory) for p in params]
    M = plan.microbatches
    msg = spec.layer_output_bytes(b) // (t * cp)
    pbytes = tuple(round(p * sb.weights) for p in params)
    seq = sum(M * plan.dp * (x + y) for x, y in zip(f, bk)) + sum(upd)  # the one-device baseline: no ZeRO
    # ZeRO-3 / FSDP fetch per sub-module (DeepSpeed: each weight matrix) or per layer, so the
    # collectives are counted by the stage's layers and a layer's linears
    linears = [g.n * g.k for g in layer_gemms(spec, 1, t)]
    f, bk, wg, end_bytes = zero_collectives(sim, plan, pbytes, f, bk, wg, layers=per, linears=linears,
                                            copy_Bps=hw.device.mem_bandwidth_Bps * eff.memory)
    b_ns, w_ns = tuple(to_ns(x) for x in bk), tuple(to_ns(w) for w in wg)
    costs = StageCosts(
        f_ns=tuple(to_ns(x) for x in f), b_ns=b_ns, u_ns=tuple(to_ns(x) for x in upd),
        loss_ns=0, msg_bytes=(msg,) * S, param_bytes=pbytes, saved_bytes=tuple(round(x) for x in saved),
        bi_ns=tuple(x - w for x, w in zip(b_ns, w_ns)), bw_ns=w_ns,
        wgrad_bytes=tuple(round(n * layer_wgrad_bytes(spec, b, t) / cp + (head_dw if i == S - 1 else 0))
                          for i, n in enumerate(per)),
        # the zero-bubble implementation frees after I what W does not read: the linears' inputs
        # stay (the head's W reads the final norm's output)
        w_input_bytes=tuple(round(n * layer_w_input_bytes(spec, b, t, plan.sp) / cp
                                  + (spec.element_bytes * n_tok * spec.hidden if i == S - 1 else 0))
                            for i, n in enumerate(per)),
        allreduce_bytes=end_bytes,
        seq_ns=to_ns(seq * t * cp * plan.pp), batch_size=plan.batch, action_batch=b,
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
