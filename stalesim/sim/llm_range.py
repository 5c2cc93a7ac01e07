"""The range over the choices a user left open: best and worst iteration time and memory beside the point.

A published run rarely states its interleaving depth, micro-batch size,
recomputation or overlap settings, and those choices move an LLM estimate by
10-30%. One number hides that; :func:`choice_range` re-predicts the plan for
every combination of the open choices' candidate values (:data:`OPEN_CHOICES`)
and returns the fastest and slowest iteration, the least and most memory, and
the fastest combination that fits, next to the point (the plan as given, its
open choices at their defaults). Combinations that cannot apply (a
micro-batch that does not divide the batch, an interleaving depth the layers
do not split into) are counted, not shown.

Candidates: ``chunks`` (interleaved 1F1B only) 2, 3, 4, 6, 8; ``micro_batch``
1, 2, 4, 8, 16 (the global batch fixed, so the micro-batch count follows);
``recompute`` none, selective, op, full; ``overlap`` the four overlap switches
(tensor-parallel backward, data-parallel buckets, ZeRO-3 prefetch, pipeline transfers)
together: the framework's defaults, all on, all off (each switch can only
hide communication, so the extremes of time are at all on and all off).

Cost: the closed forms take about a millisecond, and the product is at most
5 x 5 x 3 x 3 = 225 plans. A schedule the LLM estimate event-simulates
(zero-bubble, DualPipeV) costs about half a millisecond per simulated forward or
backward (a 4-stage, 64-micro-batch ZB-H1 replica: about a quarter of a second on
one core), so its range is computed only
when all its candidates together simulate at most :data:`EVENT_ACTIONS`
forward and backward actions, and says so otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.sim.llm_plan import EVENT, INTERLEAVED, ParallelPlan, family
from stalesim.workloads.transformer import RECOMPUTE

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.llm_kernels import KernelEfficiency
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.transformer import TransformerSpec

__all__ = ["CANDIDATES", "EVENT_ACTIONS", "OPEN_CHOICES", "ChoiceRange", "Outcome", "choice_range"]

OPEN_CHOICES = ("chunks", "micro_batch", "recompute", "overlap")
CANDIDATES: dict[str, tuple[Any, ...]] = {
    "chunks": (2, 3, 4, 6, 8),
    "micro_batch": (1, 2, 4, 8, 16),
    "recompute": RECOMPUTE,
    "overlap": ("framework", "on", "off"),
}
# forward + backward actions (stages x micro-batches x 2, summed over the candidates) above which an
# event-simulated schedule's range is not computed: about a second of simulation
EVENT_ACTIONS = 2048
_OVERLAPS = ("tp_overlap", "dp_overlap", "zero_prefetch", "p2p_overlap")


@dataclass(frozen=True)
class Outcome:
    """One combination of the open choices and what the estimate says for it."""

    choices: dict[str, Any]
    iteration_s: float
    memory_bytes: int
    fits: bool

    def label(self) -> str:
        return ", ".join(f"{k.replace('_', '-')} {v}" for k, v in self.choices.items())


@dataclass(frozen=True)
class ChoiceRange:
    """The extremes over the open choices (``skipped_reason`` set when none were tried)."""

    open: tuple[str, ...]
    tried: dict[str, tuple[Any, ...]]
    point: dict[str, Any]
    evaluated: int
    not_applicable: int
    fastest: Outcome | None = None
    slowest: Outcome | None = None
    least_memory: Outcome | None = None
    most_memory: Outcome | None = None
    fastest_fitting: Outcome | None = None
    skipped_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def summary(self) -> str:
        """Two or three lines for the terminal."""
        if self.skipped_reason:
            return f"range over open choices: not computed ({self.skipped_reason})"
        if not self.open:
            return "range over open choices: none left open (every choice was given)"
        tried = "; ".join(f"{k.replace('_', '-')} {','.join(map(str, v))}" for k, v in self.tried.items())
        point = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in self.point.items())
        head = (f"range over open choices ({tried}: {self.evaluated} predicted, {self.not_applicable} cannot "
                f"apply; the point is {point})")
        if self.fastest is None or self.slowest is None or self.least_memory is None or self.most_memory is None:
            return head + ": no combination applies"
        gb = 1e9
        lines = [head,
                 f"  iteration {self.fastest.iteration_s:.4g} s ({self.fastest.label()}) .. "
                 f"{self.slowest.iteration_s:.4g} s ({self.slowest.label()})",
                 f"  memory per GPU {self.least_memory.memory_bytes / gb:.1f} GB ({self.least_memory.label()}) .. "
                 f"{self.most_memory.memory_bytes / gb:.1f} GB ({self.most_memory.label()})"]
        ff = self.fastest_fitting
        lines.append(f"  fastest that fits: {ff.iteration_s:.4g} s ({ff.label()})" if ff is not None
                     else "  no combination fits")
        return "\n".join(lines)


def _apply(plan: ParallelPlan, choice: str, value: Any, stage_layers: Any) -> ParallelPlan:
    if choice == "chunks":
        return replace(plan, chunks=value, stage_layers=stage_layers(plan.pp * value))
    if choice == "overlap":
        flag = None if value == "framework" else value == "on"
        return replace(plan, **dict.fromkeys(_OVERLAPS, flag))
    return replace(plan, **{choice: value})


def _point(plan: ParallelPlan, choice: str) -> Any:
    if choice == "overlap":
        return "framework"
    return getattr(plan, choice)


def choice_range(spec: TransformerSpec, plan: ParallelPlan, hw: Hardware, open_choices: tuple[str, ...] | list[str],
                 *, eff: KernelEfficiency | None = None, first_last: bool = False) -> ChoiceRange:
    """Predict ``plan`` for every combination of the ``open_choices``' candidates (module doc).

    ``first_last``: the plan's stage split is one layer fewer on the first and last stage, so it
    is placed again for each interleaving depth; an explicit ``plan.stage_layers`` list fixes the
    stages, and then ``chunks`` is not varied."""
    from stalesim.sim.llm_costs import first_last_layers
    from stalesim.sim.llm_kernels import DEFAULT_EFFICIENCY
    from stalesim.sim.parallel import predict_llm

    for c in open_choices:
        if c not in OPEN_CHOICES:
            raise StalesimError(f"open_choices: {c!r} is not one of {', '.join(OPEN_CHOICES)}")
    fam = family(plan.schedule)
    opened = [c for c in OPEN_CHOICES if c in open_choices]
    if "chunks" in opened and (fam != INTERLEAVED or (plan.stage_layers is not None and not first_last)):
        opened.remove("chunks")  # only interleaving has a depth to choose; a given split fixes it
    tried = {c: CANDIDATES[c] for c in opened}
    point = {c: _point(plan, c) for c in opened}

    def stage_layers(stages: int) -> tuple[int, ...] | None:
        return first_last_layers(spec.layers, stages) if first_last else None

    cands: list[tuple[tuple[Any, ...], ParallelPlan | None]] = []
    for values in itertools.product(*(tried[c] for c in opened)):
        cand: ParallelPlan | None = plan
        try:
            for c, v in zip(opened, values):
                cand = _apply(plan if cand is None else cand, c, v, stage_layers)
        except StalesimError:
            cand = None
        cands.append((values, cand))
    if fam == EVENT:
        actions = sum(2 * c.pp * c.chunks * max(c.microbatches, 1) for _v, c in cands if c is not None)
        if actions > EVENT_ACTIONS:
            return ChoiceRange(tuple(opened), tried, point, 0, 0,
                               skipped_reason=f"{plan.schedule} is event-simulated: its {len(cands)} candidates "
                                              f"would simulate {actions:,} actions, over {EVENT_ACTIONS:,}")
    outcomes: list[Outcome] = []
    skipped = 0
    for values, cand in cands:
        try:
            if cand is None:
                raise StalesimError("not applicable")
            p = predict_llm(spec, cand, hw, eff or DEFAULT_EFFICIENCY)
        except StalesimError:
            skipped += 1
            continue
        outcomes.append(Outcome(dict(zip(opened, values)), p.iteration_s, p.memory_bytes, p.fits))
    if not outcomes:
        return ChoiceRange(tuple(opened), tried, point, 0, skipped)
    fitting = [o for o in outcomes if o.fits]
    return ChoiceRange(
        tuple(opened), tried, point, len(outcomes), skipped,
        fastest=min(outcomes, key=lambda o: o.iteration_s), slowest=max(outcomes, key=lambda o: o.iteration_s),
        least_memory=min(outcomes, key=lambda o: o.memory_bytes),
        most_memory=max(outcomes, key=lambda o: o.memory_bytes),
        fastest_fitting=min(fitting, key=lambda o: o.iteration_s) if fitting else None)
