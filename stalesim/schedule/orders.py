"""Order builders shared by the generators.

The schedules of the DESIGN.md table differ in a few choices (micro-batching,
flush or not, where the update goes, which weight policy). The orderings that
they share live here once, so no generator re-implements 1F1B or the register
pipeline's cycle structure.
"""

from __future__ import annotations

from collections.abc import Iterator

from stalesim.schedule.actions import Action, Kind, act


def one_f_one_b(n_items: int, warmup: int) -> Iterator[tuple[Kind, int]]:
    """1F1B order over items 0..n_items-1 on one stage.

    ``warmup`` forwards first, then alternate one forward and one backward
    (forward first), then the remaining backwards. Stage s of S uses
    ``warmup = S - 1 - s``, so it has at most S - s items in flight.
    """
    warmup = max(0, min(warmup, n_items))
    for i in range(warmup):
        yield Kind.F, i
    for i in range(n_items - warmup):
        yield Kind.F, warmup + i
        yield Kind.B, i
    for i in range(max(0, n_items - warmup), n_items):
        yield Kind.B, i


def forward(stage: int, batch: int, micro: int | None, with_loss: bool, worker: int = 0) -> list[Action]:
    """F, followed by LOSS on a stage that computes a loss."""
    out = [act(Kind.F, stage, batch, micro, worker)]
    if with_loss:
        out.append(act(Kind.LOSS, stage, batch, micro, worker))
    return out


def sequential_batch(stages: int, batch: int, worker: int = 0) -> list[list[Action]]:
    """One batch run start to finish with no overlap: per-stage lists F, (LOSS), B, U."""
    per_stage: list[list[Action]] = []
    for s in range(stages):
        acts = forward(s, batch, None, s == stages - 1, worker)
        acts.append(act(Kind.B, s, batch, None, worker))
        acts.append(act(Kind.U, s, batch, None, worker))
        per_stage.append(acts)
    return per_stage


def register_pipeline(
    stages: int, batches: range, *, local_loss: bool = False
) -> list[list[Action]]:
    """The register pipeline of the stale-weights paper, one list per stage.

    Every stage boundary holds a register in both directions, so in cycle c stage
    s runs the forward of batch c - s and the backward of batch
    c - (2S - 2 - s); the last stage runs forward, loss and backward of one batch
    in the same cycle. Within a cycle the forward comes first (it reads the
    weights as they were at the start of the cycle) and the update follows the
    backward. With ``local_loss`` every stage trains on its own head, so the
    backward of batch t follows its forward in the same cycle.
    """
    first, last = batches.start, batches.stop
    per_stage: list[list[Action]] = [[] for _ in range(stages)]
    if last <= first:
        return per_stage
    n_cycles = (last - first) + 2 * (stages - 1)
    for c in range(n_cycles):
        for s in range(stages):
            f_batch = first + c - s
            b_batch = f_batch if local_loss else first + c - (2 * stages - 2 - s)
            acts = per_stage[s]
            if first <= f_batch < last:
                acts.extend(forward(s, f_batch, None, local_loss or s == stages - 1))
            if first <= b_batch < last:
                acts.append(act(Kind.B, s, b_batch))
                acts.append(act(Kind.U, s, b_batch))
    return per_stage
