"""Split-backward schedules: the backward runs as ``I`` (input gradient, on the
critical path to the previous stage) and ``W`` (weight gradient, deferrable).

From Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism" (ICLR
2024), under its assumption T_F = T_B = T_W (B there is our I):

* ``zb-h1`` (ZB-H1, "memory efficient"): the 1F1B order with I in place of B;
  stage s delays its weight gradients by s micro-batches (the W of the j-th
  backward runs right after the (j + s)-th I), so every stage keeps S
  micro-batches in flight, the first stage's 1F1B peak, and the delayed W fill
  the tail. Bubble (S-1)(T_F + T_B - T_W): a third of 1F1B's. With V chunks per
  device (loop placement) it is the interleaved zero-bubble order (Megatron's
  interleaving with warm-up (V-1) g + (R-1-r), as torch's
  ScheduleInterleavedZeroBubble runs it).
* ``zb-h2`` (ZB-H2, "zero bubble"): more warm-up forwards, up to 2S - 1
  micro-batches in flight, I as early as possible, W in every remaining slot
  (:func:`~stalesim.schedule.orders.unit_time_zero_bubble` with limit 2S - 1):
  every stage is busy for 3M steps, so consecutive flushes tile with no bubble
  at all (the paper also drops the optimizer's global synchronization to get
  there; our updates are per stage, so nothing else is needed).
* ``zb-v`` (ZB-V, section 6): two chunks per device in a V shape (device r holds
  stages r and 2R-1-r); warm-up 2(R-r)-1 forwards of chunk 0, r pairs
  (F chunk 1, F chunk 0), R-r triples (F, I, W of chunk 1); steady state
  F0 I0 W0 F1 I1 W1; cool-down r pairs (I0, I1), R-r pairs (I0, W0), then the
  remaining W of chunk 1 and of chunk 0. Zero bubble for uniform costs with
  1F1B's activation memory. Fewer than 2R-1 micro-batches run the order of
  2R-1 restricted to the existing ones (a restriction of a deadlock-free order
  to the same items on every device stays deadlock-free).
* ``dualpipev`` (DeepSeek-AI, DeepSeek-V3 technical report, DualPipe; the
  V-shaped "cut in half" DualPipeV of the DualPipe repository): V placement,
  eight phases per device r: 2(R-r-1) forwards of chunk 0; r+1 pairs
  (F0, F1); R-r-1 triples (I1, a pending W, F1); the main phase of M-2R+r+1
  overlapped pairs (F0 + full B1, F1 + full B0), whose F and B would overlap on
  a GPU with communication to hide (here they run back to back, which is how a
  single compute stream runs them); R-r-1 (B1, F1 + B0); r+1 pairs of
  backwards turning from full B to split I halfway; R-r-1 (pending W, backward
  of chunk 0); and the last r+1 pending W. Needs M >= 2R (= S).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.generators.virtual import emit
from stalesim.schedule.ir import ScheduleConfig
from stalesim.schedule.orders import interleaved, rounds_group, unit_time_zero_bubble
from stalesim.schedule.placement import chunks_of

PerDevice = list[list[Action]]
Op = tuple[Kind, int, int]  # (kind, chunk, micro-batch) on one device


def _flush(cfg: ScheduleConfig, placement: str, order_of: Callable[[int], list[Op]]) -> PerDevice:
    """Per batch: each device's order (``order_of(r)`` -> ops), then each chunk's update."""
    S = cfg.stages
    V = cfg.stages_per_device or 1
    R = S // V
    chunks = chunks_of(placement, S, V)
    orders = [order_of(r) for r in range(R)]
    lists: PerDevice = [[] for _ in range(R)]
    for t in range(cfg.batches or 0):
        for r in range(R):
            for kind, c, m in orders[r]:
                emit(lists[r], kind, chunks[r][c], t, m, S)
            lists[r].extend(act(Kind.U, s, t) for s in chunks[r])
    return lists


def zb_h1_order(M: int, V: int, R: int, r: int) -> list[Op]:
    """ZB-H1 (V = 1) / interleaved zero bubble (V > 1) on device r."""
    ops: list[Op] = []
    backwards: list[tuple[int, int]] = []
    w_done = 0
    for kind, c, m in interleaved(M, V, R, r, group=rounds_group(M, R), warmup_factor=1):
        if kind is Kind.F:
            ops.append((Kind.F, c, m))
            continue
        ops.append((Kind.I, c, m))
        backwards.append((c, m))
        if len(backwards) - 1 >= r:  # W delayed by r backwards on device r
            wc, wm = backwards[w_done]
            ops.append((Kind.W, wc, wm))
            w_done += 1
    ops.extend((Kind.W, c, m) for c, m in backwards[w_done:])
    return ops


def zb_h1(cfg: ScheduleConfig) -> PerDevice:
    S, V, M = cfg.stages, cfg.stages_per_device or 1, cfg.microbatches
    return _flush(cfg, "loop", lambda r: zb_h1_order(M, V, S // V, r))


def zb_h2(cfg: ScheduleConfig) -> PerDevice:
    S, M = cfg.stages, cfg.microbatches
    orders = unit_time_zero_bubble(S, M, limit=2 * S - 1)
    return _flush(cfg, "contiguous", lambda r: [(k, 0, m) for k, m in orders[r]])


def zb_v_order(M: int, R: int, r: int) -> list[Op]:
    """The ZB-V order of device r (chunk 0 = stage r, chunk 1 = stage 2R-1-r)."""
    n = max(2 * R - 1, M)
    ops: list[Op] = []
    nxt = {(k, c): 0 for k in (Kind.F, Kind.I, Kind.W) for c in (0, 1)}

    def do(kind: Kind, c: int) -> None:
        ops.append((kind, c, nxt[(kind, c)]))
        nxt[(kind, c)] += 1

    for _ in range(2 * (R - r) - 1):
        do(Kind.F, 0)
    for _ in range(r):
        do(Kind.F, 1)
        do(Kind.F, 0)
    for _ in range(R - r):
        do(Kind.F, 1)
        do(Kind.I, 1)
        do(Kind.W, 1)
    while nxt[(Kind.F, 1)] < nxt[(Kind.F, 0)] or nxt[(Kind.F, 0)] < n:
        if nxt[(Kind.F, 0)] < n:
            do(Kind.F, 0)
        do(Kind.I, 0)
        do(Kind.W, 0)
        do(Kind.F, 1)
        do(Kind.I, 1)
        do(Kind.W, 1)
    for _ in range(r):
        do(Kind.I, 0)
        do(Kind.I, 1)
    for _ in range(R - r):
        do(Kind.I, 0)
        do(Kind.W, 0)
    for c in (1, 0):
        while nxt[(Kind.W, c)] < nxt[(Kind.I, c)]:
            do(Kind.W, c)
    return [op for op in ops if op[2] < M]


def zb_v(cfg: ScheduleConfig) -> PerDevice:
    S, M = cfg.stages, cfg.microbatches
    return _flush(cfg, "v", lambda r: zb_v_order(M, S // 2, r))


def dualpipev_order(M: int, R: int, r: int) -> list[Op]:
    """The DualPipeV order of device r (chunk 0 = stage r, chunk 1 = stage 2R-1-r)."""
    ops: list[Op] = []
    f = [0, 0]
    b = [0, 0]  # backwards started (full B or I), per chunk
    pending: deque[tuple[int, int]] = deque()  # (chunk, micro) whose W is still to run

    def fwd(c: int) -> None:
        ops.append((Kind.F, c, f[c]))
        f[c] += 1

    def bwd(c: int, split: bool) -> None:
        ops.append((Kind.I if split else Kind.B, c, b[c]))
        if split:
            pending.append((c, b[c]))
        b[c] += 1

    def weight() -> None:
        if pending:
            c, m = pending.popleft()
            ops.append((Kind.W, c, m))

    for _ in range(2 * (R - r - 1)):
        fwd(0)
    for _ in range(r + 1):
        fwd(0)
        fwd(1)
    for _ in range(R - r - 1):
        bwd(1, True)
        weight()
        fwd(1)
    for _ in range(M - 2 * R + r + 1):
        fwd(0)  # on the last device the first pair is not overlapped; the order is the same
        bwd(1, False)
        fwd(1)
        bwd(0, False)
    for _ in range(R - r - 1):
        bwd(1, False)
        fwd(1)
        bwd(0, False)
    split = False
    half = (r + 1) // 2
    for i in range(r + 1):
        if i == half and r % 2 == 1:
            split = True
        bwd(1, split)
        if i == half and r % 2 == 0:
            split = True
        bwd(0, split)
    for _ in range(R - r - 1):
        weight()
        bwd(0, split)
    while pending:
        weight()
    return ops


def dualpipev(cfg: ScheduleConfig) -> PerDevice:
    S, M = cfg.stages, cfg.microbatches
    return _flush(cfg, "v", lambda r: dualpipev_order(M, S // 2, r))
