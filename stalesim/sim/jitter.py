"""Action jitter: a compute action takes a draw around its mean time, not the mean.

The simulator's costs are means, and a chain of actions on one device adds their means. A
pipeline also *joins* chains: a receive waits for the later of two devices, an all-reduce for
the slowest worker. The mean of a maximum exceeds the maximum of the means (Jensen), so a
simulation with mean durations is optimistic for every schedule whose devices wait on each
other, by an amount that grows with the spread of the action times relative to their length
(replaying measured runs with mean costs came out 0.8-1.9% fast on a small char-GPT on 2 CPU
ranks, and data parallelism up to 6% fast; drawing each action from the run's own durations
removed most of that: docs/validate.md).

An :class:`ActionJitter` holds, per compute kind, samples of *time over mean* (measured: each
stage-timing round over its pass's mean, :func:`stalesim.validate.stagetime.round_ratios`).
The event engine multiplies every compute action's duration by one independent draw from its
kind's samples (:meth:`ActionJitter.factors`, seeded: the same seed gives the same timeline).
The samples' mean is 1, so the expected busy time is unchanged; only the waits move.
Independent draws are the model's assumption: a slow moment of the machine that slows every
action at once is not jitter (it is the timing passes' drift), and an action slowed by the
wait before it is the after-wait charge (:mod:`stalesim.validate.afterwait`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError
from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.sim.events import Program

#: a ratio further than this from 1 is not jitter but a broken measurement
MAX_RATIO = 20.0
#: the least a measured time over its mean is taken as (a small-sample correction can push a
#: fast action towards zero, which no action takes)
MIN_RATIO = 0.05


def measured_ratio(x: float) -> float:
    """A measured time over its mean as a draw: kept within [MIN_RATIO, MAX_RATIO]. A real
    action can exceed the bound (one preempted for a time slice on an oversubscribed host
    measured 24x its mean), and one such action must not refuse a whole spread."""
    return min(MAX_RATIO, max(MIN_RATIO, x))


@dataclass(frozen=True)
class ActionJitter:
    """Per compute kind (``F``, ``B``, ``I``, ``W``, ``U``, ``LOSS``), samples of an action's
    time over its mean; a kind without samples keeps its mean time. ``seed``: the draws."""

    ratios: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    seed: int = 0

    def check(self) -> None:
        for kind, xs in self.ratios.items():
            if kind not in COMPUTE_NAMES_ORDERED:
                raise StalesimError(f"jitter: {kind!r} is not a compute kind "
                                    f"({', '.join(COMPUTE_NAMES_ORDERED)})")
            if not xs:
                raise StalesimError(f"jitter: kind {kind} has no samples")
            bad = [x for x in xs if not (isinstance(x, (int, float)) and math.isfinite(x)
                                         and 0 < x <= MAX_RATIO)]
            if bad:
                raise StalesimError(f"jitter: kind {kind}: a time over its mean must be in (0, {MAX_RATIO:g}], "
                                    f"got {bad[0]!r}")

    def with_seed(self, seed: int) -> ActionJitter:
        return replace(self, seed=seed)

    def factors(self, prog: Program) -> list[float]:
        """Per action of ``prog`` (by its id): the factor its duration is multiplied by, one
        draw from its kind's samples for a compute action, 1 for everything else. The draws
        follow the devices' action lists in order, so they depend on the seed alone."""
        rng = random.Random(self.seed)
        out = [1.0] * prog.n_actions
        actions = prog.actions
        for ops in prog.ops:
            for _op, gid, _kc, _s, _ref in ops:
                xs = self.ratios.get(actions[gid].kind.value)  # only compute kinds have samples (check)
                if xs:
                    out[gid] = rng.choice(xs)
        return out

    def spread(self) -> dict[str, float]:
        """Per kind, the coefficient of variation of its samples (the report's summary)."""
        out = {}
        for k, xs in self.ratios.items():
            m = sum(xs) / len(xs)
            out[k] = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)) / m if m > 0 else 0.0
        return out
