"""``plan --workload``: rank schedules (and error feedback) for an analytic transformer on a cluster.

A 70B model cannot be emulated here to count its iterations to a target loss, so a
workload plan ranks what the simulator can say for it, in seconds: the predicted
time per iteration and the memory per GPU of each candidate (schedule x
mitigation) at the same degrees, batch and training state
(:func:`stalesim.sim.parallel.predict_llm`: closed forms, or one event-simulated
pipeline replica for the zero-bubble and other flushed orders). Candidates that fit
are ranked by iteration time; then those that do not fit; then those that cannot
apply, each with its one-line reason.

``iterations`` (optional) turns the iteration time into a time for that many
iterations, the same number for every candidate; stale candidates usually need more
to reach the same loss, which an emulation of a smaller proxy (``stalesim plan
--model ...``) measures; nothing here guesses it.

Mitigations: only ``error-feedback`` changes time or memory (one more fp32 buffer
per parameter in the optimizer state); it applies to schedules with stale weights.

``open_choices`` (the choices the user left open, :mod:`stalesim.sim.llm_range`):
each row also carries the fastest and slowest iteration over them
(``range_fastest_s``, ``range_slowest_s``, ``range_fastest_fitting_s``); the
rank stays the point's, the range is shown beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.units import fmt_seconds

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.parallel import ParallelPlan
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.transformer import TransformerSpec

__all__ = ["LLM_MITIGATIONS", "llm_rows", "llm_table", "rank_key"]

# mitigation name (the study's) -> whether the plan keeps error feedback's buffer
LLM_MITIGATIONS = {"none": False, "error-feedback": True}
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "weight_versions")


def rank_key(error: str | None, fits: bool | None, iteration_s: float | None) -> tuple[bool, bool, float]:
    """The ranking of candidates (module doc): those that apply before those that cannot, those that
    fit before those that do not, then by iteration time (the published-runs check ranks with it too)."""
    return (error is not None, not fits, iteration_s or 0.0)


def _label(schedule: str, mitigation: str) -> str:
    return schedule if mitigation == "none" else f"{schedule} +{mitigation}"


def llm_rows(spec: TransformerSpec, hw: Hardware, base: ParallelPlan, schedules: list[str],
             mitigations: list[str], *, iterations: int | None = None,
             open_choices: Sequence[str] = (), first_last: bool = False) -> list[dict[str, Any]]:
    """One row per (schedule, mitigation), ranked (module doc). ``base`` gives the degrees,
    batch and training state; each schedule runs its own stages per device (ZB-V's and
    DualPipeV's 2, interleaved-1F1B's ``base.chunks`` when > 1, else 2). ``first_last``: one
    layer fewer on the first and last stage, placed over each schedule's own stages."""
    from stalesim.schedule import get_spec, schedule_names
    from stalesim.sim.llm_costs import first_last_layers
    from stalesim.sim.llm_range import choice_range
    from stalesim.sim.parallel import family, predict_llm, supported_schedules

    for m in mitigations:
        if m not in LLM_MITIGATIONS:
            raise StalesimError(f"mitigations: {m!r} does not change an LLM plan's time or memory (give "
                                f"{' or '.join(LLM_MITIGATIONS)}; the others change convergence only, "
                                f"which --workload cannot emulate)")
    for s in schedules:
        if s not in schedule_names():
            raise StalesimError(f"schedules: unknown {s!r} (known: {', '.join(schedule_names())})")
        if family(s) is None:
            raise StalesimError(f"schedules: {s!r} has no LLM estimate (use {', '.join(supported_schedules())})")
    rows: list[dict[str, Any]] = []
    for sched in schedules:
        sp = get_spec(sched)
        chunks = sp.stages_per_device
        if family(sched) == "interleaved":
            chunks = base.chunks if base.chunks > 1 else sp.stages_per_device
        for mit in mitigations:
            row: dict[str, Any] = {"rank": None, "label": _label(sched, mit), "schedule": sched, "mitigation": mit,
                                   "chunks": chunks, "iteration_s": None, "time_s": None, "tokens_per_s": None,
                                   "memory_gb": None, **{f"{k}_gb": None for k in COMPONENTS},
                                   "fits": None, "error": None}
            # a schedule without micro-batches (PipeDream, stale) runs a replica's whole batch at once
            b = base.micro_batch if sp.uses_micro else base.batch // base.dp
            plan = replace(base, schedule=sched, chunks=chunks, micro_batch=b,
                           error_feedback=LLM_MITIGATIONS[mit])
            try:
                if first_last:  # each schedule's own stage count: pp x its stages per device
                    plan = replace(plan, stage_layers=first_last_layers(spec.layers, plan.pp * chunks))
                p = predict_llm(spec, plan, hw)
            except StalesimError as exc:
                row["error"] = str(exc)
                rows.append(row)
                continue
            if open_choices:
                rng = choice_range(spec, plan, hw, tuple(open_choices), first_last=first_last)
                row.update(range_fastest_s=rng.fastest.iteration_s if rng.fastest else None,
                           range_slowest_s=rng.slowest.iteration_s if rng.slowest else None,
                           range_fastest_fitting_s=(rng.fastest_fitting.iteration_s if rng.fastest_fitting
                                                    else None),
                           range_note=rng.skipped_reason)
            row.update(iteration_s=p.iteration_s, tokens_per_s=p.tokens_per_s, memory_gb=p.memory_bytes / 1e9,
                       fits=p.fits, bubble=p.bubble_fraction, microbatches=plan.microbatches,
                       time_s=None if iterations is None else iterations * p.iteration_s,
                       **{f"{k}_gb": v / 1e9 for k, v in p.memory_breakdown.items()})
            rows.append(row)
    rows.sort(key=lambda r: rank_key(r["error"], r["fits"], r["iteration_s"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def llm_table(rows: list[dict[str, Any]], header: str, *, iterations: int | None = None) -> str:
    """The terminal table: rank, candidate, iteration time (and its range over the open choices,
    when rows carry one), time for ``iterations``, memory per GPU by component and whether it fits;
    rows that cannot apply say why."""
    ranged = any("range_fastest_s" in r for r in rows)
    lines = [header,
             f"{'#':>3} {'candidate':<30} {'iter s':>8} " + (f"{'range s':>15} " if ranged else "") + f"{'bubble':>7} "
             + (f"{'time for ' + str(iterations):>16} " if iterations else "")
             + f"{'GB/GPU':>7} {'weights':>8} {'grads':>6} {'optim':>6} {'activ':>6} {'versions':>8}  fits"]
    for r in rows:
        if r["error"]:
            lines.append(f"{r['rank']:>3} {r['label'][:30]:<30} cannot apply: {r['error']}")
            continue
        tt = ""
        if iterations:
            tt = f"{fmt_seconds(r['time_s']):>16} "
        rg = ""
        if ranged:
            lo, hi = r.get("range_fastest_s"), r.get("range_slowest_s")
            rg = f"{f'{lo:.3f}..{hi:.3f}' if lo is not None and hi is not None else 'n/a':>15} "
        lines.append(f"{r['rank']:>3} {r['label'][:30]:<30} {r['iteration_s']:>8.3f} {rg}{r['bubble']:>7.1%} {tt}"
                     f"{r['memory_gb']:>7.1f} {r['weights_gb']:>8.1f} {r['gradients_gb']:>6.1f} "
                     f"{r['optimizer_gb']:>6.1f} {r['activations_gb']:>6.1f} {r['weight_versions_gb']:>8.1f}  "
                     f"{'yes' if r['fits'] else 'NO'}")
    return "\n".join(lines)

