"""``--workload`` flags shared by ``simulate``, ``sweep`` and ``plan``: an analytic transformer and how it is trained.

``--workload llama2-70b`` (a preset of :mod:`stalesim.workloads.transformer`, no
profile, no model built) or ``--model-spec my.json`` (any shape:
:mod:`stalesim.workloads.model_spec`), either with shape flags overriding fields
(``--layers``, ``--hidden``, ``--heads``, ``--kv-heads``, ``--ffn``,
``--ffn-type``, ``--vocab``, ``--seq``), with ``--tp``, ``--cp``, ``--pp`` (or
``-S``: stages = pp x V; ``--stage-layers`` for an uneven split),
``-P/--dp``, ``--micro-batch``, ``-B`` (global batch in sequences) or ``-M``,
``--sp``, ``--recompute``, ``--zero``, ``--optimizer``, ``--precision``,
``--framework`` and the overlap switches (``--tp-overlap`` ...) and a
cluster (``--node``, or ``--hardware`` naming one, or ``--target`` [``--link``]
for one node). ``plan`` takes them too (``--devices`` GPUs in all). The answer is
:func:`stalesim.sim.parallel.predict_llm`'s (closed forms; the zero-bubble and other
flushed orders event-simulated): iteration time, throughput, memory per GPU by
component, fits or not.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import positive_int
from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.transformer import TransformerSpec

# the model-shape flags: each overrides the TransformerSpec field of its name
SHAPE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "ffn_type", "vocab", "seq")
# the overlap switches: each sets the ParallelPlan field of its name (left out: the framework's)
OVERLAP_FLAGS = ("tp_overlap", "dp_overlap", "zero_prefetch", "p2p_overlap")
# --stage-layers' keyword for one layer fewer on the first and last stage
FIRST_LAST = "first-last"


class _ShapeSource(argparse.Action):
    """--workload and --model-spec both name the model (``args.workload`` is set by either, so every
    command's "is this an LLM estimate" test is one attribute); both given is refused later."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.shape_sources = [*(getattr(namespace, "shape_sources", None) or []), option_string]
        namespace.workload = values
        if self.dest == "model_spec":
            namespace.model_spec = values


def _stage_layers_arg(text: str) -> str | tuple[int, ...]:
    if text.strip().lower() == FIRST_LAST:
        return FIRST_LAST
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {FIRST_LAST} or comma-separated layer counts, "
                                         f"got {text[:40]!r}") from None
    if any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"every stage needs at least 1 layer, got {text[:40]!r}")
    return vals


def _yes_no(text: str) -> bool:
    if text not in ("yes", "no"):
        raise argparse.ArgumentTypeError(f"expected yes or no, got {text[:20]!r}")
    return text == "yes"


def add_llm_args(p: argparse.ArgumentParser, *, lists: bool = False) -> None:
    """The workload flags; ``lists``: sweep's comma-separated grids for --tp/--pp/--recompute/--zero."""
    from stalesim.cli.flagcheck import LLM_GROUP, choice_type, int_choice_type, list_of
    from stalesim.sim.llm_plan import FRAMEWORKS
    from stalesim.workloads.memory_llm import OPTIMIZERS, PRECISIONS, ZERO_STAGES
    from stalesim.workloads.transformer import FFN_TYPES, RECOMPUTE, preset_names

    def grid(conv: Any) -> Any:  # sweep's comma lists, each item checked by the item's type
        return list_of(conv) if lists else conv

    g = p.add_argument_group(LLM_GROUP)
    g.add_argument("--workload", default=None, metavar="NAME", action=_ShapeSource,
                   help=f"transformer preset (instead of --profile): {', '.join(preset_names())}")
    g.add_argument("--model-spec", default=None, metavar="SPEC.json|.toml", action=_ShapeSource,
                   help="any transformer shape from a JSON or TOML file (docs/llm-models.md; instead of --workload)")
    for name, meta, text in (("layers", "L", "transformer layers"), ("hidden", "H", "hidden size"),
                             ("heads", "A", "attention (query) heads"),
                             ("kv_heads", "K", "key/value heads (fewer than heads: grouped-query attention)"),
                             ("ffn", "F", "FFN width"), ("vocab", "V", "vocabulary size"),
                             ("seq", "S", "sequence length")):
        g.add_argument(f"--{name.replace('_', '-')}", type=positive_int, default=None, metavar=meta,
                       help=f"{text} (overrides the preset's or the spec file's)")
    g.add_argument("--ffn-type", default=None, metavar="|".join(FFN_TYPES),
                   help="FFN kind (overrides the preset's or the spec file's)")
    g.add_argument("--tp", type=grid(positive_int), default=None,
                   help="tensor-parallel size (divides the node size)" + (" list" if lists else ""))
    g.add_argument("--pp", type=grid(positive_int), default=None,
                   help="pipeline-parallel devices (stages = pp x stages-per-device)" + (" list" if lists else ""))
    g.add_argument("--micro-batch", type=positive_int, default=None, metavar="b",
                   help="sequences per micro-batch (default 1)")
    g.add_argument("--sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    g.add_argument("--recompute", type=grid(choice_type(RECOMPUTE, "recomputation")), default=None,
                   metavar="|".join(RECOMPUTE),
                   help="activation recomputation (default none; op: torchtitan's per-op selective policy)")
    g.add_argument("--recompute-every", type=positive_int, default=None, metavar="N",
                   help="recompute only every N-th layer, the others keep their activations (default 1)")
    g.add_argument("--pending-limit", type=positive_int, default=None, metavar="N",
                   help="zb-h1/zb-h2 as the zero-bubble fork's automatic scheduler runs them: at most N "
                        "micro-batches wait for their weight gradients per stage (pp for ZB-1p, 2 pp for "
                        "ZB-2p); memory holds min(N, M) of them (default: the handcrafted order's)")
    g.add_argument("--zero", type=grid(int_choice_type(ZERO_STAGES, "ZeRO stage")), default=None,
                   metavar=f"{ZERO_STAGES[0]}..{ZERO_STAGES[-1]}",
                   help="ZeRO stage: 1 shards optimizer state over dp, 2 also gradients, 3 also weights")
    g.add_argument("--optimizer", type=choice_type(tuple(OPTIMIZERS), "optimizer"), default=None,
                   metavar="|".join(OPTIMIZERS), help="default adam")
    g.add_argument("--precision", type=choice_type(PRECISIONS, "precision"), default=None,
                   metavar="|".join(PRECISIONS),
                   help="mixed: bf16 weights and gradients + fp32 master and moments (default)")
    g.add_argument("--cp", type=positive_int, default=None,
                   help="context-parallel size: each sequence split over cp GPUs (GPUs = tp x cp x pp x dp)")
    g.add_argument("--stage-layers", type=_stage_layers_arg, default=None, metavar=f"7,8,..,7|{FIRST_LAST}",
                   help="layers per pipeline stage (pp x stages-per-device entries), or first-last: one layer "
                        "fewer on the first and last stage (default: an even split)")
    g.add_argument("--framework", type=choice_type(FRAMEWORKS, "framework"), default=None,
                   metavar="|".join(FRAMEWORKS),
                   help="training framework whose memory and overlap conventions apply (default megatron)")
    for name, text in (("tp_overlap", "tensor-parallel collectives of the backward hidden under its GEMMs"),
                       ("dp_overlap", "data-parallel gradient reduction bucketed into the backward"),
                       ("zero_prefetch", "ZeRO-3/FSDP all-gathers the next layer during this one"),
                       ("p2p_overlap", "pipeline sends and receives run beside the compute (no: each is waited for)")):
        g.add_argument(f"--{name.replace('_', '-')}", type=_yes_no, default=None, metavar="yes|no",
                       help=f"{text} (default: what --framework does)")
    if lists:
        g.add_argument("--gpus", type=positive_int, default=None,
                       help="GPUs in all: dp = gpus / (tp x cp x pp) for each grid point (instead of -P)")


def check_llm_flags(args: argparse.Namespace) -> None:
    """LLM flags without ``--workload`` (and a profile with one) are one-line errors; so are the
    flags the closed form does not read, with it (:func:`stalesim.cli.flagcheck.check_modes`)."""
    from stalesim.cli.flagcheck import check_modes

    if len(getattr(args, "shape_sources", None) or []) > 1:
        raise StalesimError(f"{args.shape_sources[-1]}: give one of --workload NAME and --model-spec FILE")
    if getattr(args, "workload", None) is None:
        check_modes(getattr(args, "command", ""), args)  # the LLM group's flags, read off the parser
        if getattr(args, "profile", None) is None and getattr(args, "model", None) is None:
            other = "--model NAME, or " if hasattr(args, "model") else ""  # simulate profiles one here
            raise StalesimError(f"--profile: give a profile (or {other}--workload NAME)")
        return
    if getattr(args, "profile", None) is not None:
        raise StalesimError("--workload: give either --profile or --workload (or --model-spec), not both")
    check_modes(getattr(args, "command", ""), args)  # every flag the closed form does not read


def workload_spec(args: argparse.Namespace) -> TransformerSpec:
    """The model: the --model-spec file or the --workload preset, with the shape flags' fields."""
    from stalesim.workloads.model_spec import load_model_spec
    from stalesim.workloads.transformer import get_preset

    spec = load_model_spec(args.model_spec) if getattr(args, "model_spec", None) else get_preset(args.workload)
    changes = {f: getattr(args, f) for f in SHAPE_FLAGS if getattr(args, f, None) is not None}
    return spec.with_(**changes) if changes else spec


def llm_hardware(args: argparse.Namespace) -> Any:
    """A :class:`~stalesim.workloads.hardware.Hardware` with its cluster from --node | --hardware |
    --target [--link] [--node-size --inter-link]."""
    from dataclasses import replace

    from stalesim.workloads.hardware import (
        ClusterSpec,
        get_link,
        hardware_from_catalog,
        hardware_from_node,
        load_hardware,
    )

    algo = args.inter_algorithm or "ring"
    target = getattr(args, "target", None)
    link = getattr(args, "link", None)
    for many, one in (("targets", "target"), ("links", "link")):  # sweep's lists: one value here
        vals = getattr(args, many, None)
        if vals:
            if len(vals) > 1:
                raise StalesimError(f"--{many}: --workload sweeps one {one} (give one)")
            target, link = (vals[0], link) if one == "target" else (target, vals[0])
    link = link or args.intra_link
    if getattr(args, "hardware", None):
        if args.node:
            raise StalesimError("--node: give either a catalog node or --hardware, not both")
        hw = load_hardware(args.hardware)
    elif args.node:
        hw = hardware_from_node(args.node, inter_link=args.inter_link, allreduce_algorithm=algo, device=target)
        cluster = hw.cluster
        assert cluster is not None  # a node always has one
        if link:
            cluster = replace(cluster, intra_link=get_link(link))
            hw = replace(hw, link=get_link(link))
        if args.node_size:
            cluster = replace(cluster, node_size=args.node_size)
        return replace(hw, cluster=cluster)
    elif target:
        hw = hardware_from_catalog(target, link or "ideal")
    else:
        raise StalesimError("--workload: needs the hardware: --node (e.g. dgx-h100), --hardware HW.json "
                            "or --target KIND [--link KIND]")
    if args.node_size or args.inter_link:
        if not (args.node_size and args.inter_link):
            missing = "--inter-link" if args.node_size else "--node-size"
            raise StalesimError(f"{missing}: a cluster needs both a node size and an inter-node link (or --node)")
        hw = replace(hw, cluster=ClusterSpec(node_size=args.node_size, intra_link=hw.link,
                                             inter_link=get_link(args.inter_link), inter_algorithm=algo))
    return hw


def open_choices(args: argparse.Namespace) -> tuple[str, ...]:
    """The choices the flags leave open (:data:`stalesim.sim.llm_range.OPEN_CHOICES`): the
    interleaving depth without -V (and without an explicit --stage-layers list), the micro-batch
    size when -B fixes the batch but not its split, recomputation, and the overlap switches when
    none is given."""
    left: list[str] = []
    if getattr(args, "stages_per_device", None) is None and not isinstance(getattr(args, "stage_layers", None),
                                                                          tuple):
        left.append("chunks")
    if args.micro_batch is None and args.batch_size is not None:
        left.append("micro_batch")
    if args.recompute is None:
        left.append("recompute")
    if all(getattr(args, f, None) is None for f in OVERLAP_FLAGS):
        left.append("overlap")
    return tuple(left)


def plan_from_args(args: argparse.Namespace, spec: TransformerSpec, *, tp: int | None = None,
                   pp: int | None = None, dp: int | None = None, schedule: str | None = None,
                   microbatches: int | None = None, recompute: str | None = None, zero: int | None = None,
                   chunks: int | None = None) -> ParallelPlan:
    """A :class:`~stalesim.sim.parallel.ParallelPlan` of ``spec`` from the flags (sweep passes one grid
    point; ``spec`` places ``--stage-layers first-last`` over the point's stages)."""
    from stalesim.sim.llm_costs import first_last_layers
    from stalesim.sim.parallel import ParallelPlan

    sched = schedule or args.schedule
    from stalesim.schedule import get_spec, schedule_names

    if sched not in schedule_names():
        raise StalesimError(f"schedule: unknown {sched!r} (known: {', '.join(schedule_names())})")
    V = chunks or getattr(args, "stages_per_device", None) or get_spec(sched).stages_per_device
    if pp is None:
        pp = args.pp
        S = getattr(args, "stages", None)
        if pp is None:
            pp = (S // V if S and S % V == 0 else S) or 1
        elif S is not None and pp * V != S:
            raise StalesimError(f"--stages: {S} contradicts --pp {pp} x stages-per-device {V}")
    dp = dp if dp is not None else args.workers
    b = args.micro_batch or 1
    M = microbatches if microbatches is not None else args.microbatches
    B = args.batch_size
    if B is None:
        B = b * dp * M
    elif M not in (1, None) and b * dp * M != B:
        raise StalesimError(f"--batch-size: {B} sequences contradict -M {M} x --micro-batch {b} x dp {dp}")
    split = getattr(args, "stage_layers", None)
    stage_layers = first_last_layers(spec.layers, pp * V) if split == FIRST_LAST else split
    return ParallelPlan(tp=tp if tp is not None else (args.tp or 1), pp=pp, dp=dp, micro_batch=b, global_batch=B,
                        schedule=sched, chunks=V, sp=args.sp,
                        recompute=recompute or args.recompute or "none",
                        recompute_every=getattr(args, "recompute_every", None) or 1,
                        zero=zero if zero is not None else (args.zero or 0),
                        optimizer=args.optimizer or "adam", precision=args.precision or "mixed",
                        cp=getattr(args, "cp", None) or 1, stage_layers=stage_layers,
                        framework=getattr(args, "framework", None) or "megatron",
                        tp_overlap=getattr(args, "tp_overlap", None), dp_overlap=getattr(args, "dp_overlap", None),
                        zero_prefetch=getattr(args, "zero_prefetch", None),
                        p2p_overlap=getattr(args, "p2p_overlap", None),
                        pending_limit=getattr(args, "pending_limit", None))
