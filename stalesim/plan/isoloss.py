"""Iso-loss overhead of an asynchronous schedule: how many more iterations (and samples)
it needs to reach the plan's target than the synchronous schedule of the same plan.

Time to target mixes two effects: a stale schedule's iterations are cheaper (no pipeline
flush), but it may need more of them (its gradients are computed on older weights). The
second one alone is what work on delayed pipelines reports as the cost of asynchrony, at
equal loss (e.g. marin-community/marin #6431: tokens to a loss over the synchronous
run's), so a plan states it next to the time:

    overhead = mean iterations to target (asynchronous) / mean iterations to target (reference)

**Reference.** A synchronous schedule with one loss computes the same gradients whatever
its partition and order (:mod:`stalesim.plan.candidates`), so each optimizer has one
synchronous iteration count. The reference is the one-device ``sequential`` row with the
same optimizer; without one (not reached, or not in the plan), the flushed micro-batched
schedule (a synchronous, non-data-parallel row) with the same optimizer, and the record
says which. A data-parallel synchronous row is the last resort (its BatchNorm sees a
shard per worker, a slightly different algorithm). An asynchronous row with no reachable
reference of its optimizer has no overhead.

Every candidate of a plan trains on the same global batch per iteration, so the samples
(and, for a language model, tokens) to target are in the same ratio as the iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stalesim.plan.candidates import BASELINE
from stalesim.plan.compose import Row
from stalesim.schedule import get_spec


@dataclass(frozen=True)
class IsoLoss:
    """One asynchronous row's iterations to target over its synchronous reference's."""

    overhead: float  # iterations (= samples) to target over the reference's
    reference: str  # the reference row's label
    reference_kind: str  # "sequential" or "flushed" or "data-parallel"
    samples_to_target: float  # mean iterations x global batch
    reference_samples: float

    def to_dict(self) -> dict[str, Any]:
        return {"iso_loss_overhead": self.overhead, "iso_loss_reference": self.reference,
                "iso_loss_reference_kind": self.reference_kind, "samples_to_target": self.samples_to_target,
                "reference_samples_to_target": self.reference_samples}


# the dict keys a row without an overhead carries (plan.json keeps one shape per row)
EMPTY: dict[str, Any] = {k: None for k in IsoLoss(0.0, "", "", 0.0, 0.0).to_dict()}


def _kind(row: Row) -> str:
    c = row.candidate
    if c.schedule == BASELINE:
        return "sequential"
    return "data-parallel" if get_spec(c.schedule).data_parallel else "flushed"


_PREFERENCE = ("sequential", "flushed", "data-parallel")


def references(rows: Sequence[Row]) -> dict[str, Row]:
    """Per optimizer, the synchronous row that reached the target, by the preference of the
    module doc (the first such row in the plan's order within a kind)."""
    best: dict[str, Row] = {}
    for r in rows:
        c = r.candidate
        if not c.synchronous or not r.convergence.reached or r.convergence.interval is None:
            continue
        held = best.get(c.optimizer)
        if held is None or _PREFERENCE.index(_kind(r)) < _PREFERENCE.index(_kind(held)):
            best[c.optimizer] = r
    return best


def iso_loss(rows: Sequence[Row], batch_size: int) -> dict[str, IsoLoss]:
    """Each asynchronous row that reached the target, by label: its overhead (module doc)."""
    refs = references(rows)
    out: dict[str, IsoLoss] = {}
    for r in rows:
        c, iv = r.candidate, r.convergence.interval
        ref = refs.get(c.optimizer)
        if c.synchronous or ref is None or iv is None or not r.convergence.reached:
            continue
        base = ref.convergence.interval
        assert base is not None  # references() keeps reached rows only
        if base.mean <= 0:
            continue
        out[c.label] = IsoLoss(iv.mean / base.mean, ref.candidate.label, _kind(ref),
                               iv.mean * batch_size, base.mean * batch_size)
    return out
