"""Crossings of batched emulations confirmed by single ones.

Why: a batched (``--batched``) float32 emulation is not the single emulation bit for bit.
Its kernels (``bmm`` over the stacked weights, grouped convolution) sum in another order
than the single run's ``mm`` / convolution, so the losses differ by about 1e-7 relative
after one step and the difference grows with training like any float32 reassociation (on
LeNet-5 / synthetic, 3 stages, 300 steps: up to 108 % on one step of a pipedream seed).
The executor equals the single emulation, so an iteration count read from a batched run is
not the one the executor reproduces. float64 batched runs are exact (to round-off), but
float32 is what users train in, and making the stacked kernels sum in the single kernels'
order would give up the batching.

So a plan made with ``--batched`` keeps the batched runs as the search (which candidates
reach the target, and about when) and reruns each reached candidate's seeds one at a time,
only as far as needed: to the batched crossing plus ``margin`` iterations; a seed whose
single run has not crossed by then runs to the candidate's full horizon. The confirmed
crossing replaces the batched one. A learning rate that depends on the run length (not
``constant``) makes a shorter run a different run, so those seeds run at the full horizon.
Accuracy targets (measured in epochs) are confirmed at the full horizon too. The batched
runs are kept apart from the single ones (``<out>/batched/``): they share their configs and
so their store keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from stalesim.plan.convergence import (
    Convergence,
    EmulationStore,
    Target,
    iterations_to_accuracy,
    iterations_to_loss,
    run_id,
    seed_interval,
)
from stalesim.runtime.config import TrainConfig

C = TypeVar("C")


def confirm_margin(crossing: int, smooth: int) -> int:
    """Iterations past the batched crossing a single run goes before it falls back to the
    full horizon: a quarter of the crossing (the drift grows with training), at least two
    smoothing windows (the crossing is a trailing mean)."""
    return max(2 * max(1, smooth), math.ceil(crossing / 4))


def _crossing(summary: dict[str, Any], target: Target) -> int | None:
    if target.kind == "accuracy":
        bpe = int(summary.get("batches_per_epoch") or 1)
        return iterations_to_accuracy(summary.get("epoch_metrics") or [], bpe, target.value)
    return iterations_to_loss(list(summary.get("losses") or []), target.value, target.smooth)


def confirm(convs: dict[C, Convergence], configs: Callable[[C, int], list[TrainConfig]],
            store: EmulationStore, run: Callable[[list[tuple[str, TrainConfig]]], list[dict]],
            target: Target) -> dict[C, Convergence]:
    """The reached candidates of ``convs`` with each seed's crossing from a single emulation.

    ``configs(cand, length)``: the candidate's configs per seed at that length (in the
    target's unit, as :func:`~stalesim.plan.convergence.converge` calls it); ``store`` holds
    single emulations only (never the batched ones: they share a config and its key);
    ``run`` runs them one by one. Candidates not reached are returned unchanged."""
    out = dict(convs)
    reached = [c for c, v in convs.items() if v.reached]
    # first pass: each seed to its batched crossing + margin; second: the misses to the horizon
    lengths: dict[tuple[Any, int], int] = {}
    for c in reached:
        full = configs(c, convs[c].horizon)
        for i, n in enumerate(convs[c].per_seed):
            short = target.kind == "loss" and full[i].lr_schedule == "constant" and n is not None
            lengths[(c, i)] = (min(convs[c].horizon, n + confirm_margin(n, target.smooth))
                               if short and n is not None else convs[c].horizon)
    got: dict[tuple[Any, int], int | None] = {}
    runs: dict[Any, list[str]] = {c: [] for c in reached}
    for _ in range(2):
        todo = {k: configs(k[0], h)[k[1]] for k, h in lengths.items() if k not in got}
        if not todo:
            break
        done = store.fetch(list(todo.values()), run)
        for k, cfg in todo.items():
            n = _crossing(done[run_id(cfg)], target)
            if n is None and lengths[k] < convs[k[0]].horizon:
                lengths[k] = convs[k[0]].horizon  # not yet crossed: once more at the full horizon
                continue
            got[k] = n
            runs[k[0]].append(run_id(cfg))
    for c in reached:
        old = convs[c]
        per_seed = [got.get((c, i)) for i in range(len(old.per_seed))]
        note = "single-run confirmed (batched: " + ", ".join(map(str, old.per_seed)) + ")"
        if all(n is not None for n in per_seed):
            iv = seed_interval([float(n) for n in per_seed if n is not None])
            note += "" if iv.n > 1 else "; one seed: no interval"
            out[c] = Convergence(per_seed, old.horizon, "reached", iv, note, old.emulation_s, old.runs + runs[c])
        else:
            out[c] = Convergence(per_seed, old.horizon, "not reached", None,
                                 note + f"; a seed's single run did not reach the target within {old.horizon} "
                                 "iterations", old.emulation_s, old.runs + runs[c])
    return out


def changed(before: Sequence[int | None], after: Sequence[int | None]) -> int:
    """How many seeds' crossings the confirmation moved (for the plan's log line)."""
    return sum(1 for a, b in zip(before, after) if a != b)
