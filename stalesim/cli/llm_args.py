"""``--workload`` flags shared by ``simulate``, ``sweep`` and ``plan``: an analytic transformer and how it is trained.

``--workload llama2-70b`` (a preset of :mod:`stalesim.workloads.transformer`, no
profile, no model built) with ``--tp``, ``--pp`` (or ``-S``: stages = pp x V),
``-P/--dp``, ``--micro-batch``, ``-B`` (global batch in sequences) or ``-M``,
``--sp``, ``--recompute``, ``--zero``, ``--optimizer``, ``--precision`` and a
cluster (``--node``, or ``--hardware`` naming one, or ``--target`` [``--link``]
for one node). ``plan`` takes them too (``--devices`` GPUs in all). The answer is
:func:`stalesim.sim.parallel.predict_llm`'s (closed forms; the zero-bubble and other
flushed orders event-simulated): iteration time, throughput, memory per GPU by
component, fits or not.
"""

from __future__ import annotations

import argparse
from typing import Any

from stalesim.cli.common import positive_int
from stalesim.errors import StalesimError

# flags that only mean something with --workload (name, default)
LLM_ONLY = (("tp", None), ("pp", None), ("micro_batch", None), ("sp", False), ("recompute", None),
            ("zero", None), ("optimizer", None), ("precision", None), ("seq", None))


def add_llm_args(p: argparse.ArgumentParser, *, lists: bool = False) -> None:
    """The workload flags; ``lists``: sweep's comma-separated grids for --tp/--pp/--recompute/--zero."""
    from stalesim.cli.common import int_list

    def grid(conv: Any) -> Any:
        def parse(text: str) -> list[Any]:
            vals = [conv(x.strip()) for x in text.split(",")]
            if not vals:
                raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
            return vals
        return parse

    g = p.add_argument_group("LLM workloads (analytic transformer: no profile, no model built)")
    g.add_argument("--workload", default=None, metavar="NAME",
                   help="transformer preset: gpt3-175b, llama2-7b/13b/70b, llama3-8b/70b, megatron-1.7b .. "
                        "megatron-1t (instead of --profile)")
    g.add_argument("--seq", type=positive_int, default=None, help="sequence length (default: the preset's)")
    ints = grid(int) if lists else positive_int
    g.add_argument("--tp", type=int_list if lists else positive_int, default=None,
                   help="tensor-parallel size (divides the node size)" + (" list" if lists else ""))
    g.add_argument("--pp", type=int_list if lists else positive_int, default=None,
                   help="pipeline-parallel devices (stages = pp x stages-per-device)" + (" list" if lists else ""))
    g.add_argument("--micro-batch", type=positive_int, default=None, metavar="b",
                   help="sequences per micro-batch (default 1)")
    g.add_argument("--sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    g.add_argument("--recompute", type=grid(str) if lists else str, default=None, metavar="none|selective|full",
                   help="activation recomputation (default none)")
    g.add_argument("--zero", type=ints, default=None, metavar="0..3",
                   help="ZeRO stage: 1 shards optimizer state over dp, 2 also gradients, 3 also weights")
    g.add_argument("--optimizer", default=None, metavar="adam|adamw|muon|sgd", help="default adam")
    g.add_argument("--precision", default=None, metavar="mixed|fp32",
                   help="mixed: bf16 weights and gradients + fp32 master and moments (default)")
    if lists:
        g.add_argument("--gpus", type=positive_int, default=None,
                       help="GPUs in all: dp = gpus / (tp x pp) for each grid point (instead of -P)")


def check_llm_flags(args: argparse.Namespace) -> None:
    """LLM flags without ``--workload`` (and a profile with one) are one-line errors."""
    if getattr(args, "workload", None) is None:
        for name, default in LLM_ONLY:
            if getattr(args, name, default) not in (default, None):
                raise StalesimError(f"--{name.replace('_', '-')}: needs --workload (an analytic transformer)")
        if getattr(args, "gpus", None) is not None:
            raise StalesimError("--gpus: needs --workload (an analytic transformer)")
        if getattr(args, "profile", None) is None and getattr(args, "model", None) is None:
            other = "--model NAME, or " if hasattr(args, "model") else ""  # simulate profiles one here
            raise StalesimError(f"--profile: give a profile (or {other}--workload NAME)")
        return
    if getattr(args, "profile", None) is not None:
        raise StalesimError("--workload: give either --profile or --workload, not both")
    # simulator and profile flags the closed form has no use for (given = not their default)
    for flag in ("ppv", "ppv_candidates", "trace", "plot", "fold", "switch", "batches", "topology", "comm_overlap",
                 "cpu_comm_occupancy", "bucket_mb", "no_symmetry", "loss_time"):
        v = getattr(args, flag, None)
        if v not in (None, [], False, 0.0):
            raise StalesimError(f"--{flag.replace('_', '-')}: does not apply to --workload "
                                f"(the closed-form LLM estimate)")
    if getattr(args, "warmup", 0):
        raise StalesimError("--warmup: does not apply to --workload (the closed-form LLM estimate)")


def workload_spec(args: argparse.Namespace) -> Any:
    from stalesim.workloads.transformer import get_preset

    spec = get_preset(args.workload)
    return spec.with_(seq=args.seq) if args.seq else spec


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


def plan_from_args(args: argparse.Namespace, *, tp: int | None = None, pp: int | None = None,
                   dp: int | None = None, schedule: str | None = None, microbatches: int | None = None,
                   recompute: str | None = None, zero: int | None = None,
                   chunks: int | None = None) -> Any:
    """A :class:`~stalesim.sim.parallel.ParallelPlan` from the flags (sweep passes one grid point)."""
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
    return ParallelPlan(tp=tp if tp is not None else (args.tp or 1), pp=pp, dp=dp, micro_batch=b, global_batch=B,
                        schedule=sched, chunks=V, sp=args.sp,
                        recompute=recompute or args.recompute or "none",
                        zero=zero if zero is not None else (args.zero or 0),
                        optimizer=args.optimizer or "adam", precision=args.precision or "mixed")
