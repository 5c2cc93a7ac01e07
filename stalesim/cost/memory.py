"""The bytes the memory model reads, measured as the executor counts them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.model import StageCosts


def with_memory_facts(costs: StageCosts, facts: list[dict[str, Any]] | None) -> StageCosts:
    """The stage costs with the bytes the memory model reads replaced by ones measured as
    the executor counts them (:func:`stalesim.runtime.memfacts.stage_memory_facts`): ints per
    stage, and on a GPU ``cuda_transient``, a per-kind dict of bytes."""
    if not facts:
        return costs
    if len(facts) != costs.stages:
        raise ValueError(f"memory facts for {len(facts)} stages, costs have {costs.stages}")
    wg = tuple(f.get("deferred_w", 0) for f in facts)
    # measured on a GPU only: per stage {kind: bytes}, and the process's library bytes
    kinds = sorted({k for f in facts for k in f.get("cuda_transient", {})})
    transient = tuple((k, tuple(int(f.get("cuda_transient", {}).get(k, 0)) for f in facts)) for k in kinds)
    library = max((int(f.get("cuda_library", 0)) for f in facts), default=0)
    return replace(costs, param_bytes=tuple(f["params"] for f in facts),
                   saved_bytes=tuple(f["activation"] for f in facts),
                   buffer_bytes=tuple(f["buffers"] for f in facts),
                   wgrad_bytes=wg if any(wg) else costs.wgrad_bytes,
                   transient_bytes=transient or costs.transient_bytes,
                   library_bytes=library or costs.library_bytes,
                   optimizer_bytes=tuple(f["optimizer"] for f in facts) if all("optimizer" in f for f in facts)
                   else costs.optimizer_bytes)


def measured_memory_facts(cfg: Any, sched: Any, *, device: str = "cpu",
                          ppv: list[int] | None = None) -> list[dict[str, Any]]:
    """Per stage, the bytes the memory model reads, measured on ``device`` as the executor
    counts them (:func:`stalesim.runtime.memfacts.stage_memory_facts`), plus on a GPU the
    CUDA terms (:func:`stalesim.runtime.memfacts.stage_cuda_memory_terms`): ``cuda_transient``
    ({action kind: bytes an action holds beyond the states around it}) and ``cuda_library``
    (the process's bytes no tensor owns, the same on every stage); absent on a CPU, where
    the count is exact."""
    from stalesim.runtime.memfacts import stage_cuda_memory_terms, stage_memory_facts

    facts: list[dict[str, Any]] = list(stage_memory_facts(cfg, sched, ppv=ppv, device=device))
    if str(device).startswith("cuda"):
        terms = stage_cuda_memory_terms(cfg, sched, ppv=ppv, device=device)
        facts = [dict(f, cuda_transient={k: int(v[s]) for k, v in terms.transient.items()},
                      cuda_library=terms.library) for s, f in enumerate(facts)]
    return facts


def predicted_peaks(cfg: Any, *, device: str = "cpu", recv_ahead: int) -> list[int]:
    """The memory model's peak bytes per device for the run ``cfg`` (a TrainConfig), with stage
    facts measured on ``device`` as the executor counts them (the optimizer's state included:
    every optimizer, per parameter): what validate predicts, without the timing model (uniform
    costs; memory does not depend on time)."""
    from stalesim.schedule import build_schedule
    from stalesim.sim.memory import memory_report
    from stalesim.sim.model import uniform_costs

    sched = build_schedule(cfg.schedule_config(cfg.iterations))
    facts = measured_memory_facts(cfg, sched, device=device)
    costs = with_memory_facts(uniform_costs(sched.stages, 1, 1), facts)
    costs = replace(costs, msg_bytes=tuple(f["message"] for f in facts))
    return list(memory_report(sched, costs, optimizer_state_factor=1.0 if cfg.momentum else 0.0,
                              recv_ahead=recv_ahead).peak_bytes)
