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


def rounds_group(n_items: int, devices: int) -> int:
    """Micro-batches per round of an interleaved order: Megatron's ``devices`` when they
    divide the items, generalized as torch.distributed.pipelining does (rounds =
    max(1, n // R), group = n // rounds)."""
    rounds = max(1, n_items // devices)
    return n_items // rounds


def interleaved(n_items: int, chunks: int, devices: int, rank: int, *, group: int,
                warmup_factor: int = 2) -> list[tuple[Kind, int, int]]:
    """Megatron's interleaved 1F1B order on device ``rank``: ``(kind, chunk, item)``.

    The k-th forward runs chunk ``(k // group) % V`` on the next item of that
    chunk, so items go through the device's V chunks in rounds of ``group``
    micro-batches (depth first); backwards visit the chunks in reverse. Warm-up:
    ``(V - 1) group + warmup_factor (R - 1 - rank)`` forwards (Megatron: factor 2;
    the zero-bubble variant's B chain moves one step per hop: factor 1), then one
    forward and one backward alternate, then the remaining backwards.

    Items that do not fill a last round (Megatron requires M % R == 0, torch
    M % rounds == 0; where they do, this is exactly their order) are handled by
    ordering whole rounds and dropping the padding items: the same items removed
    from every device leave a deadlock-free order.
    """
    V = chunks
    n = -(-n_items // group) * group if n_items else 0
    total = V * n
    warm = min((V - 1) * group + warmup_factor * (devices - 1 - rank), total)

    def fwd(k: int) -> tuple[int, int]:
        return (k // group) % V, (k // (group * V)) * group + k % group

    def bwd(k: int) -> tuple[int, int]:
        c, item = fwd(k)
        return V - 1 - c, item

    out: list[tuple[Kind, int, int]] = [(Kind.F, *fwd(k)) for k in range(warm)]
    for i in range(total - warm):
        out.append((Kind.F, *fwd(warm + i)))
        out.append((Kind.B, *bwd(i)))
    out.extend((Kind.B, *bwd(i)) for i in range(total - warm, total))
    return [op for op in out if op[2] < n_items] if n != n_items else out


def unit_time_zero_bubble(stages: int, n_items: int, limit: int) -> list[list[tuple[Kind, int]]]:
    """Per-stage ``(kind, item)`` order from unit-time list scheduling of split backwards.

    Every stage, at every unit step (F = I = W = 1, as the zero-bubble paper
    assumes), runs the first of: the next ``I`` (input gradient) whose output
    gradient has arrived; the next ``F`` whose input has arrived, if fewer than
    ``limit`` items hold activations (F done, W not yet); the oldest pending
    ``W``. Items go through each kind in order. With ``limit = 2 S - 1`` this is
    the zero-bubble paper's ZB-H2: B passes as early as possible, extra warm-up
    forwards up to a memory of 2S - 1 micro-batches, weight gradients filling
    every remaining slot and the tail, every stage busy for exactly 3 n_items
    steps (a parallelogram, so consecutive flushes tile with no bubble).
    """
    S, n = stages, n_items
    done_f = [[-1] * n for _ in range(S)]
    done_i = [[-1] * n for _ in range(S)]
    nf, ni, nw = [0] * S, [0] * S, [0] * S
    out: list[list[tuple[Kind, int]]] = [[] for _ in range(S)]
    t = 0
    while any(nw[s] < n for s in range(S)):
        picks: list[tuple[Kind, int] | None] = []
        for s in range(S):
            k = ni[s]
            if (k < n and 0 <= done_f[s][k] < t
                    and (s == S - 1 or 0 <= done_i[s + 1][k] < t)):
                picks.append((Kind.I, k))
                continue
            k = nf[s]
            if k < n and (s == 0 or 0 <= done_f[s - 1][k] < t) and nf[s] - nw[s] < limit:
                picks.append((Kind.F, k))
                continue
            picks.append((Kind.W, nw[s]) if nw[s] < ni[s] else None)
        for s, pick in enumerate(picks):
            if pick is None:
                continue
            kind, k = pick
            if kind is Kind.F:
                done_f[s][k] = t
                nf[s] += 1
            elif kind is Kind.I:
                done_i[s][k] = t
                ni[s] += 1
            else:
                nw[s] += 1
            out[s].append(pick)
        t += 1
    return out
