"""Partitions: PPVs <-> block cuts, stage splitting, and the min-max partitioner.

Conventions (the stale-weights paper, Zhang & Abdelrahman):

* Weight layers (conv/linear) are counted from 1. A PPV entry ``k`` places a
  pipeline register after weight layer ``k``, together with the activation,
  norm and pooling that follow it. A PPV with k entries gives S = k + 1 stages.
* Internally a partition is a list of **cuts**: block boundary indices ``c`` in
  ``1..L-1`` (L blocks); stage s holds blocks ``cuts[s-1] .. cuts[s]-1``.
* A PPV entry that falls inside a multi-weight-layer block (a residual block)
  is rejected: that block is indivisible.
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from stalesim.workloads.zoo import LayeredModel

__all__ = [
    "Partition",
    "block_flops",
    "cuts_to_ppv",
    "default_ppv",
    "min_max_partition",
    "ppv_to_cuts",
    "split_stages",
    "stage_ranges",
    "weights_cuts_to_ppv",
    "weights_ppv_to_cuts",
]


# ------------------------------------------------------------- PPV <-> cuts
def weights_ppv_to_cuts(weight_layers: Sequence[int], ppv: Sequence[int]) -> list[int]:
    """PPV -> block cuts given the per-block weight-layer counts.

    The cut for entry k is the *last* block boundary at which exactly k weight
    layers lie before it, so blocks without weight layers (a lone pooling or
    activation) stay with the weight layer before them.
    """
    wl = [int(w) for w in weight_layers]
    total = sum(wl)
    cum = [0, *accumulate(wl)]  # cum[c] = weight layers in blocks 0..c-1
    cuts: list[int] = []
    prev = 0
    for i, raw in enumerate(ppv):
        if isinstance(raw, bool) or not isinstance(raw, int) and not (
            isinstance(raw, float) and float(raw).is_integer()
        ):
            raise StalesimError(f"ppv[{i}]: expected an integer, got {raw!r}")
        k = int(raw)
        if k <= prev:
            raise StalesimError(
                f"ppv[{i}]: entries must be strictly increasing and >= 1, got {k}"
                + (f" after {prev}" if i else "")
            )
        if k >= total:
            raise StalesimError(
                f"ppv[{i}]: {k} is out of range; the model has {total} weight layers, "
                f"so an entry must be between 1 and {total - 1}"
            )
        # the last boundary c in 1..L-1 with cum[c] == k (cum is nondecreasing: bisect, so a
        # profile of a million blocks is cut in microseconds)
        last = bisect.bisect_right(cum, k, 1, len(wl)) - 1
        candidates = [last] if last >= 1 and cum[last] == k else []
        if not candidates:
            # weight layer k lies strictly inside a block with >= 2 weight layers
            b = next(j for j in range(len(wl)) if cum[j] < k < cum[j + 1])
            raise StalesimError(
                f"ppv[{i}]: {k} would split block {b} (weight layers {cum[b] + 1}-{cum[b + 1]}), "
                "which is indivisible; use a boundary such as "
                f"{cum[b]} or {cum[b + 1]}"
            )
        cuts.append(max(candidates))
        prev = k
    return cuts


def weights_cuts_to_ppv(weight_layers: Sequence[int], cuts: Sequence[int]) -> list[int]:
    """Block cuts -> PPV (weight layers before each cut)."""
    wl = [int(w) for w in weight_layers]
    cum = [0, *accumulate(wl)]
    _check_cuts(cuts, len(wl))
    ppv = [cum[c] for c in cuts]
    for i, (c, k) in enumerate(zip(cuts, ppv)):
        if k == 0 or (i and k == ppv[i - 1]) or k == cum[-1]:
            raise StalesimError(
                f"cuts[{i}]: cut {c} leaves a stage without weight layers, so it has no PPV"
            )
    return ppv


def _check_cuts(cuts: Sequence[int], n_blocks: int) -> None:
    prev = 0
    for i, c in enumerate(cuts):
        if isinstance(c, bool) or not isinstance(c, int):
            raise StalesimError(f"cuts[{i}]: expected an integer, got {c!r}")
        if c <= prev or c >= n_blocks:
            raise StalesimError(
                f"cuts[{i}]: cuts must be strictly increasing block indices in 1..{n_blocks - 1}, "
                f"got {c}"
            )
        prev = c


def ppv_to_cuts(model: LayeredModel, ppv: Sequence[int]) -> list[int]:
    """PPV (weight layers, 1-based) -> block boundary indices for ``model``."""
    return weights_ppv_to_cuts(model.weight_layers, ppv)


def cuts_to_ppv(model: LayeredModel, cuts: Sequence[int]) -> list[int]:
    """Block boundary indices -> PPV for ``model``."""
    return weights_cuts_to_ppv(model.weight_layers, cuts)


def stage_ranges(cuts: Sequence[int], n_blocks: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` block ranges of each stage (stop exclusive)."""
    _check_cuts(cuts, n_blocks)
    bounds = [0, *cuts, n_blocks]
    return [(bounds[s], bounds[s + 1]) for s in range(len(bounds) - 1)]


# ------------------------------------------------------------- stage splitting
def split_stages(
    model: LayeredModel,
    *,
    ppv: Sequence[int] | None = None,
    stages: int | None = None,
    cuts: Sequence[int] | None = None,
) -> list[nn.Sequential]:
    """Cut ``model`` into S ``nn.Sequential`` stages.

    Give exactly one of ``ppv`` (S = len(ppv)+1), ``stages`` (balanced by FLOPs
    with :func:`default_ppv`) or ``cuts`` (block indices). The stages *share*
    the model's block modules (no copies), so composing them is the model.
    """
    from collections import OrderedDict

    from torch import nn

    given = sum(x is not None for x in (ppv, stages, cuts))
    if given != 1:
        raise StalesimError("split_stages: give exactly one of ppv=, stages= or cuts=")
    n = len(model.block_names)
    if stages is not None:
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
            raise StalesimError(f"stages: expected an integer >= 1, got {stages!r}")
        if stages > n:
            raise StalesimError(
                f"stages: {stages} stages requested but model {model.name!r} has only {n} blocks"
            )
        ppv = default_ppv(model, stages)
    if ppv is not None:
        cuts = ppv_to_cuts(model, ppv)
    assert cuts is not None
    ranges = stage_ranges(list(cuts), n)
    keys = [k for k, _ in model.named_children()]
    mods = model.blocks
    return [
        nn.Sequential(OrderedDict((keys[j], mods[j]) for j in range(a, b))) for a, b in ranges
    ]


# ------------------------------------------------------------- FLOP balance
def block_flops(model: LayeredModel) -> list[int]:
    """Forward FLOPs of each block at batch size 1 (FlopCounterMode); cached on the model."""
    cached = getattr(model, "_block_flops", None)
    if cached is not None:
        return list(cached)
    import torch

    from stalesim.workloads.flops import flop_counter

    flops: list[int] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            # FLOPs do not depend on dtype/device, but the input must match the weights
            param = next(model.parameters(), None)
            x = model.example_input(1)
            if param is not None:  # token ids stay integers
                x = x.to(dtype=param.dtype if x.is_floating_point() else x.dtype, device=param.device)
            for block in model.blocks:
                counter = flop_counter()  # counts CPU attention too
                with counter:
                    x = block(x)
                flops.append(int(counter.get_total_flops()))
    finally:
        model.train(was_training)
    model._block_flops = flops
    return list(flops)


def default_ppv(model: LayeredModel, stages: int) -> list[int]:
    """The PPV of the min-max partition of per-block forward FLOPs into ``stages``."""
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise StalesimError(f"stages: expected an integer >= 1, got {stages!r}")
    n = len(model.block_names)
    if stages > n:
        raise StalesimError(
            f"stages: {stages} stages requested but model {model.name!r} has only {n} blocks"
        )
    # blocks without weight layers cannot end a stage in PPV terms: give them a
    # tiny cost so they never get a stage of their own; block_flops is exact.
    costs = [float(f) + 1.0 for f in block_flops(model)]
    part = min_max_partition(costs, stages, weight_layers=model.weight_layers)
    return part.ppv


# ------------------------------------------------------------- partitioner
@dataclass(frozen=True)
class Partition:
    """Result of :func:`min_max_partition`.

    ``cuts``: block boundary indices; ``ppv``: the same cuts as a PPV (weight
    layers before each cut; equal to ``cuts`` when every block is one layer);
    ``stage_costs``: compute (+ outgoing communication) per stage;
    ``stage_memory``: memory per stage (None without ``memory``).
    """

    cuts: list[int]
    ppv: list[int]
    stage_costs: list[float]
    stage_memory: list[float] | None = None
    stage_comm: list[float] = field(default_factory=list)

    @property
    def stages(self) -> int:
        return len(self.cuts) + 1

    @property
    def bottleneck(self) -> float:
        return max(self.stage_costs)

    @property
    def bottleneck_stage(self) -> int:
        return max(range(len(self.stage_costs)), key=lambda s: self.stage_costs[s])

    def ranges(self, n_blocks: int) -> list[tuple[int, int]]:
        return stage_ranges(self.cuts, n_blocks)

    def to_dict(self) -> dict[str, object]:
        return {
            "stages": self.stages,
            "cuts": list(self.cuts),
            "ppv": list(self.ppv),
            "stage_costs": list(self.stage_costs),
            "stage_comm": list(self.stage_comm),
            "stage_memory": None if self.stage_memory is None else list(self.stage_memory),
            "bottleneck": self.bottleneck,
            "bottleneck_stage": self.bottleneck_stage,
        }


def _check_vector(name: str, values: Sequence[float], length: int) -> list[float]:
    vals = list(values)
    if len(vals) != length:
        raise StalesimError(f"{name}: expected {length} values, got {len(vals)}")
    out: list[float] = []
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise StalesimError(f"{name}[{i}]: must be a finite number >= 0, got {v!r}")
        out.append(float(v))
    return out


def min_max_partition(
    costs: Sequence[float],
    stages: int,
    *,
    memory: Sequence[float] | None = None,
    memory_limit: float | None = None,
    comm: Sequence[float] | None = None,
    weight_layers: Sequence[int] | None = None,
) -> Partition:
    """Exact min-max contiguous partition of ``costs`` into ``stages`` parts.

    Minimises the largest stage cost, where a stage's cost is the sum of its
    layers' costs plus ``comm[c-1]`` for the cut ``c`` that ends it (the
    sending stage pays for the transfer; ``comm`` has one entry per possible
    cut, i.e. ``len(costs) - 1``). With ``memory``/``memory_limit`` every
    stage's summed memory must fit, else StalesimError. Dynamic programming
    over prefix sums, O(S * L^2). Ties go to the earliest cuts, deterministically.
    ``weight_layers`` (per layer, default 1 each) is used to report the PPV;
    layers with 0 weight layers never end a stage, so the PPV is well defined.

    Large problems (S * L^2 beyond :data:`DP_BUDGET`) without communication costs
    take :func:`_bisect_partition` instead: bisection on the bottleneck with a
    greedy feasibility test, O(S * log L) per test, the same answer (value and
    cuts, ties included; ``tests/unit/test_workloads_partition.py`` compares them).
    Large problems *with* communication costs are refused (a cut's cost breaks the
    greedy test's exchange argument, and the DP would not finish).
    """
    problem = _problem(costs, stages, memory, memory_limit, comm, weight_layers)
    n = problem.n
    if stages * n * n <= DP_BUDGET:
        return _result(_dp_partition(problem, stages), problem, stages)
    if any(problem.comm):
        raise StalesimError(
            f"stages: an exact partition of {n:,} layers into {stages} stages with communication "
            f"costs takes O(S x L^2) = {stages * n * n:.1e} steps (at most {DP_BUDGET:.0e}); "
            f"partition without communication costs, or fewer layers or stages")
    return _result(_bisect_partition(problem, stages), problem, stages)


@dataclass(frozen=True)
class _Problem:
    """A checked partition problem as both solvers and the result read it.

    ``pre[j]``: cost of layers ``0..j-1``; ``pmem``: the same for memory (None without);
    ``comm[c-1]``: the cost of cut ``c``, paid by the stage it ends; ``allowed[j]``: a stage
    may end at cut ``j`` (a PPV boundary, see :func:`_allowed_ends`); ``mem_bound``: the
    memory limit with the DP's rounding allowance (None without a limit; then any stage
    fits); ``cumw[j]``: weight layers before cut ``j`` (the PPV of a cut).
    """

    n: int
    pre: list[float]
    pmem: list[float] | None
    comm: list[float]
    allowed: list[bool]
    memory_limit: float | None
    mem_bound: float | None
    largest_memory: float
    cumw: list[int]

    def seg(self, i: int, j: int) -> float:
        """Cost of the stage of layers ``i..j-1`` (it sends across cut ``j``)."""
        return self.pre[j] - self.pre[i] + (self.comm[j - 1] if j < self.n else 0.0)

    def fits(self, i: int, j: int) -> bool:
        """Whether layers ``i..j-1`` fit the memory limit (always, without one)."""
        if self.mem_bound is None or self.pmem is None:
            return True
        return self.pmem[j] - self.pmem[i] <= self.mem_bound

    def infeasible(self, stages: int) -> StalesimError:
        """The error for a problem with no valid partition into ``stages``."""
        if self.memory_limit is not None:
            return StalesimError(
                f"memory_limit: no partition into {stages} stages fits {self.memory_limit:g} bytes "
                f"per stage (largest single layer needs {self.largest_memory:g})")
        return StalesimError(f"stages: cannot form {stages} stages that each contain a weight layer")


def _problem(costs: Sequence[float], stages: int, memory: Sequence[float] | None,
             memory_limit: float | None, comm: Sequence[float] | None,
             weight_layers: Sequence[int] | None) -> _Problem:
    """Check :func:`min_max_partition`'s arguments (first bad one named) into a :class:`_Problem`."""
    n = len(costs)
    if n == 0:
        raise StalesimError("costs: need at least one layer")
    c = _check_vector("costs", costs, n)
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise StalesimError(f"stages: expected an integer >= 1, got {stages!r}")
    if stages > n:
        raise StalesimError(f"stages: {stages} stages requested but there are only {n} layers")
    mem = _check_vector("memory", memory, n) if memory is not None else None
    if memory_limit is not None:
        if mem is None:
            raise StalesimError("memory_limit: needs per-layer memory")
        if not math.isfinite(memory_limit) or memory_limit <= 0:
            raise StalesimError(f"memory_limit: must be a finite number > 0, got {memory_limit!r}")
    cm = _check_vector("comm", comm, n - 1) if comm is not None else [0.0] * (n - 1)
    wl = [1] * n if weight_layers is None else [int(w) for w in weight_layers]
    if len(wl) != n:
        raise StalesimError(f"weight_layers: expected {n} values, got {len(wl)}")
    cumw = [0, *accumulate(wl)]
    pre = [0.0, *accumulate(c)]
    pmem = [0.0, *accumulate(mem)] if mem is not None else None
    if not math.isfinite(pre[-1] + sum(cm)):
        raise StalesimError("costs: the total is not a finite number (values too large)")
    if pmem is not None and not math.isfinite(pmem[-1]):
        raise StalesimError("memory: the total is not a finite number (values too large)")
    return _Problem(
        n=n, pre=pre, pmem=pmem, comm=cm,
        allowed=_allowed_ends(wl, cumw, weight_layers is not None),
        memory_limit=memory_limit,
        # the limit with a relative allowance, so a stage that fits exactly is not lost to rounding
        mem_bound=None if memory_limit is None else memory_limit * (1 + 1e-12),
        largest_memory=max(mem or [0.0]), cumw=cumw)


def _allowed_ends(wl: list[int], cumw: list[int], by_weight_layers: bool) -> list[bool]:
    """``allowed[j]`` for each cut ``j`` in ``0..n``: the end of the model always; with
    per-layer weight-layer counts, a cut is a valid PPV boundary only if a weight layer lies
    before it and layer ``j`` starts a weight layer (so it is the last boundary with that count)."""
    n = len(wl)
    return [j == n or not by_weight_layers or (cumw[j] > 0 and wl[j] > 0) for j in range(n + 1)]


def _dp_partition(p: _Problem, stages: int) -> list[int]:
    """The cuts of the exact DP: the earliest cuts among those with the least bottleneck."""
    best, arg = _dp_tables(p, stages)
    if best[stages - 1][p.n] == math.inf:
        raise p.infeasible(stages)
    cuts: list[int] = []
    j = p.n
    for s in range(stages - 1, 0, -1):
        i = arg[s][j]
        cuts.append(i)
        j = i
    cuts.reverse()
    return cuts


def _dp_tables(p: _Problem, stages: int) -> tuple[list[list[float]], list[list[int]]]:
    """``best[s][j]``: min bottleneck of splitting layers ``0..j-1`` into ``s+1`` stages (inf:
    impossible), and ``arg[s][j]``: the earliest start of the last stage that achieves it."""
    n, inf = p.n, math.inf
    best = [[inf] * (n + 1) for _ in range(stages)]
    arg = [[-1] * (n + 1) for _ in range(stages)]
    for j in range(1, n + 1):
        if p.allowed[j] and p.fits(0, j):
            best[0][j] = p.seg(0, j)
    for s in range(1, stages):
        prev = best[s - 1]
        for j in range(s + 1, n + 1):
            if not p.allowed[j]:
                continue
            bv, bi = inf, -1
            for i in range(s, j):
                if prev[i] == inf or not p.fits(i, j):
                    continue
                v = max(prev[i], p.seg(i, j))
                if v < bv:
                    bv, bi = v, i
            best[s][j], arg[s][j] = bv, bi
    return best, arg


def _result(cuts: list[int], p: _Problem, stages: int) -> Partition:
    bounds = [0, *cuts, p.n]
    stage_costs = [p.seg(bounds[s], bounds[s + 1]) for s in range(stages)]
    stage_comm = [p.comm[bounds[s + 1] - 1] if bounds[s + 1] < p.n else 0.0 for s in range(stages)]
    pmem = p.pmem
    stage_mem = (
        [pmem[bounds[s + 1]] - pmem[bounds[s]] for s in range(stages)] if pmem is not None else None
    )
    ppv = [p.cumw[k] for k in cuts]
    return Partition(cuts=cuts, ppv=ppv, stage_costs=stage_costs, stage_memory=stage_mem,
                     stage_comm=stage_comm)


# the DP's work S * L^2 (20e6: about 1.5 s of pure Python); larger problems take the bisection
DP_BUDGET = 20_000_000


def _float_bits(x: float) -> int:
    """A non-negative float as an integer with the same order (IEEE 754 bit pattern)."""
    return int(struct.unpack("<q", struct.pack("<d", x))[0])


def _bits_float(b: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", b))[0])


def _bisect_partition(p: _Problem, stages: int) -> list[int]:
    """The DP's cuts without the DP (no communication costs): the same bottleneck, the
    same tie-breaking, in O(S^2 log L) greedy steps per bisection instead of O(S L^2).

    Why it is exact. With non-negative costs and memory, a stage that is valid
    (cost <= B, memory fits) stays valid when it loses layers at either end (as long
    as it still ends at an allowed cut). So for a bound B and a prefix ending at an
    allowed cut e: the fewest stages (greedy: each stage as long as it can be) is
    k_min(e, B), the most is 1 + the allowed cuts before e, and every count between
    is reachable by splitting; prefix e splits into exactly s stages under B iff
    k_min(e, B) <= s <= kmax(e). k_min is nondecreasing in e. The optimum is a float
    (a segment sum computed as the DP computes it), and feasibility is monotone in
    B, so bisecting on the floats' bit patterns finds it exactly (<= 64 tests).

    Ties as in the DP: it reconstructs from the right, taking at each step the
    *smallest* cut i whose prefix best (for one stage fewer) and last stage both stay
    within the current optimum, then continues with that prefix's own optimum. The
    feasible i form an interval (lower end from the segment bound and the count of
    allowed cuts; the prefix condition is monotone), so the smallest is the first
    allowed cut at or above the lower end."""
    search = _Bisection(p)
    if not search.feasible(p.n, stages, p.pre[p.n]):
        raise p.infeasible(stages)
    return search.cuts(stages)


class _Bisection:
    """The greedy feasibility test and the tie-exact reconstruction of
    :func:`_bisect_partition`, over the allowed-cut indexes they share."""

    def __init__(self, p: _Problem) -> None:
        n = p.n
        self.p = p
        self.prev_allowed = [0] * (n + 1)  # largest allowed internal cut <= x (0: none)
        self.cnt = [0] * (n + 2)  # cnt[x]: allowed internal cuts in 1..x-1
        last = 0
        for x in range(n + 1):
            inner = 0 < x < n and p.allowed[x]
            if inner:
                last = x
            self.prev_allowed[x] = last
            self.cnt[x + 1] = self.cnt[x] + (1 if inner else 0)
        self.next_allowed = [n] * (n + 2)  # smallest allowed cut >= x (n: none before the end)
        for x in range(n - 1, 0, -1):
            self.next_allowed[x] = x if p.allowed[x] else self.next_allowed[x + 1]
        self.next_allowed[0] = self.next_allowed[1] if n > 1 else n

    def reach(self, i: int, bound: float, e: int) -> int:
        """Farthest allowed end j in (i, e] with the stage [i, j) valid; i if none."""
        j = _farthest_within(self.p.pre, i, bound, e)
        if self.p.mem_bound is not None and self.p.pmem is not None and j > i:
            j = _farthest_within(self.p.pmem, i, self.p.mem_bound, j)
        if j >= e:
            return e
        j = self.prev_allowed[j]
        return j if j > i else i

    def feasible(self, e: int, s: int, bound: float) -> bool:
        """Prefix e (an allowed end) splits into exactly s valid stages under ``bound``."""
        if self.cnt[e] + 1 < s:
            return False
        i, k = 0, 0
        while i < e:
            k += 1
            if k > s:
                return False
            j = self.reach(i, bound, e)
            if j <= i:
                return False
            i = j
        return True

    def optimum(self, e: int, s: int, hi: float) -> float:
        """Smallest float bound under which prefix e splits into s stages (feasible at hi)."""
        lo_b, hi_b = 0, _float_bits(hi)
        if self.feasible(e, s, 0.0):
            return 0.0
        while hi_b - lo_b > 1:  # invariant: infeasible at lo_b, feasible at hi_b
            mid = (lo_b + hi_b) // 2
            if self.feasible(e, s, _bits_float(mid)):
                hi_b = mid
            else:
                lo_b = mid
        return _bits_float(hi_b)

    def cuts(self, stages: int) -> list[int]:
        """The DP's cuts, reconstructed from the right (the whole problem is feasible)."""
        n = self.p.n
        value = self.optimum(n, stages, self.p.pre[n])
        cuts: list[int] = []
        j = n
        for s in range(stages - 1, 0, -1):  # s stages remain before the cut
            lo = self.lowest_start(j, s, value)
            i = self.next_allowed[lo] if lo <= n else n
            while i < j and not self.feasible(i, s, value):  # first allowed i is it (monotone); safety net
                i = self.next_allowed[i + 1]
            if i >= j:  # cannot happen when the optimum is feasible
                raise StalesimError(f"stages: internal error reconstructing the partition at stage {s}")
            cuts.append(i)
            # the prefix's own optimum (the DP continues with best[s-1][i], possibly below value)
            below = math.nextafter(value, 0.0)
            if value > 0.0 and self.feasible(i, s, below):
                value = self.optimum(i, s, below)
            j = i
        cuts.reverse()
        return cuts

    def lowest_start(self, j: int, s: int, value: float) -> int:
        """Lowest i with the last stage [i, j) valid under ``value`` and at least s - 1
        allowed cuts before i (s stages in the prefix), i >= s."""
        p = self.p
        lo = _lowest_within(p.pre, j, value)
        if p.mem_bound is not None and p.pmem is not None:
            lo = max(lo, _lowest_within(p.pmem, j, p.mem_bound))
        return max(lo, s, bisect.bisect_left(self.cnt, s - 1, 0, p.n + 1))


def _farthest_within(prefix: list[float], i: int, bound: float, e: int) -> int:
    """Largest j in [i, e] with ``prefix[j] - prefix[i] <= bound`` (the sums as the DP rounds them)."""
    base = prefix[i]
    j = bisect.bisect_right(prefix, base + bound, i + 1, e + 1) - 1
    while j < e and prefix[j + 1] - base <= bound:  # exact predicate (rounding of base + bound)
        j += 1
    while j > i and prefix[j] - base > bound:
        j -= 1
    return j


def _lowest_within(prefix: list[float], j: int, bound: float) -> int:
    """Smallest i in [0, j] with ``prefix[j] - prefix[i] <= bound`` (the sums as the DP rounds them)."""
    lo = bisect.bisect_left(prefix, prefix[j] - bound, 0, j)
    while lo > 0 and prefix[j] - prefix[lo - 1] <= bound:
        lo -= 1
    while lo < j and prefix[j] - prefix[lo] > bound:
        lo += 1
    return lo
