"""Profile costs at another batch size, and where each number came from.

A profile measures per-layer times at one or a few batch sizes. The simulator
needs them at the mini-batch (the one-device baseline) and at every action
batch (a micro-batch, a data-parallel worker's slice), which are often outside
the measured range. How a time is carried to an unmeasured batch size decides
whether a predicted speed-up can be trusted, so the rule is explicit, chosen by
the user, and reported with every result (:class:`CostSource`).

Inside the measured range times are interpolated piecewise-linearly between
the neighbouring measured batch sizes. Outside it, with ``t(b)`` the time of a
layer phase (forward or backward) at batch ``b``, ``b_1 < ... < b_k`` the
measured batch sizes and ``c(b) = t(b) / b`` the per-sample cost:

``conservative`` (default): outside the range a per-sample cost is bracketed by
the measured ones, in the direction that can only *understate* what splitting a
batch across devices gains. A split configuration runs small batches (micro-
batches, worker slices) and is compared with one device running the whole big
batch, so:

* **below the range** (``b < b_1``, the split pieces):
  ``t(b) = min(t(b_1), max(c_hi * b, trend(b)))`` with ``c_hi`` the *highest*
  per-sample cost of any measured batch (whole-model F+B decides which batch;
  for the usual overhead-bound profile that is the smallest one, ``c(b_1)``).
  A smaller batch is never assumed to use the device better than a measured
  one did: that assumption alone can put a prediction above N x on N devices
  (a CPU profile measured cheaper per sample at batch 16 than at 32 made
  micro-batches of 8 look 3.2x faster on 2 devices). Where the two smallest
  measured batches show a per-call overhead (the line through them meets b = 0
  above zero), the time keeps it, since a smaller batch still pays it
  (``trend``). Never above ``t(b_1)``: fewer samples never take longer.
* **above the range** (``b > b_k``, usually the one-device baseline):
  ``t(b) = max(t(b_k), c_lo * b)`` with ``c_lo`` the *lowest* per-sample cost
  of any measured batch. Anything slower is avoidable: one device can always
  run a big batch as accumulated chunks of that measured size; anything faster
  is an efficiency no measurement showed. Carrying the largest measured
  batch's per-sample cost upward instead made the baseline dearer than the
  measured split pieces and ``make demo`` showed 8.3x on 8 CPUs. The
  ``t(b_k)`` floor keeps time non-decreasing in ``b`` just above the range.

So extrapolation alone never predicts more than N x on N devices; a prediction
above that line rests on per-sample costs measured inside the range (smaller
batches measured cheaper, e.g. CPU cache effects, or noise), and the
plausibility pass (:mod:`stalesim.sim.plausibility`) says so.

``trend`` (opt-in, ``--extrapolate trend``): the straight line through the two
nearest measured batch sizes, extended (per-call overhead + marginal cost per
sample), only kept physical: never below zero, never above ``t(b_1)`` below the
range, never below ``t(b_k)`` above it. It may predict a per-sample cost lower
than any measurement (a launch-bound GPU profile extended to a big batch):
results using it say so.

With a single measured batch size both rules scale times proportionally
(constant per-sample cost): there is nothing else to go on. Update times and
parameter bytes do not depend on the batch size (taken from the nearest
measured batch); activation bytes and FLOPs are counts, exactly proportional
to the batch size, so scaling them is not an estimate.

A roofline profile (:func:`stalesim.workloads.hardware.roofline_profile`)
is not measured at all: its times are a function of FLOPs and bytes, so at any
batch size they are recomputed from the (exactly scaled) counts, and its
source is ``roofline``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.profile import BatchPoint, LayerProfile

RULES = ("conservative", "trend")
DEFAULT_RULE = "conservative"
# cost sources, from most to least trustworthy (a result reports the worst it used)
SOURCES = ("measured", "interpolated", "roofline", "extrapolated")
_TIMES = ("forward_s", "backward_s")
# the halves of a split backward: optional (None in a profile that did not measure them)
_SPLIT_TIMES = ("backward_input_s", "backward_weight_s")
_COUNTS = ("output_bytes", "saved_bytes", "flops", "backward_flops")


def check_rule(rule: Any) -> str:
    """The rule name, or a StalesimError naming the field."""
    if rule not in RULES:
        raise StalesimError(f"extrapolate: expected one of {', '.join(RULES)}, got {rule!r}")
    return str(rule)


@dataclass(frozen=True)
class CostSource:
    """Where the times of a profile at ``batch_size`` come from.

    ``source``: ``measured`` (a measured batch size), ``interpolated`` (between
    two measured ones), ``extrapolated`` (outside the measured range, by
    ``rule``) or ``roofline`` (estimated from FLOPs and bytes, no measurement).
    ``measured`` lists the measured batch sizes (empty for a roofline profile).
    ``basis`` says in words which measurement the numbers rest on.
    """

    batch_size: int
    source: str
    measured: tuple[int, ...]
    rule: str | None = None
    basis: str = ""

    @property
    def measured_range(self) -> tuple[int, int] | None:
        return (self.measured[0], self.measured[-1]) if self.measured else None

    def to_dict(self) -> dict[str, Any]:
        rng = self.measured_range
        return {"batch_size": self.batch_size, "source": self.source,
                "measured_batch_sizes": list(self.measured),
                "measured_range": list(rng) if rng else None,
                "rule": self.rule, "basis": self.basis}


def worst_source(sources: Sequence[str]) -> str:
    """The least trustworthy of several sources (``given`` when none is known)."""
    known = [s for s in sources if s in SOURCES]
    if not known:
        return "given"
    return max(known, key=SOURCES.index)


def classify(sizes: Sequence[int], batch_size: int, rule: str, *, roofline: bool = False) -> CostSource:
    """The :class:`CostSource` of ``batch_size`` for measured ``sizes`` (sorted or not)."""
    if roofline:
        return CostSource(batch_size, "roofline", (), None,
                          "roofline estimate from FLOPs and bytes at this batch size")
    ss = tuple(sorted(sizes))
    lo, hi = ss[0], ss[-1]
    if batch_size in ss:
        return CostSource(batch_size, "measured", ss, None, f"measured at batch {batch_size}")
    if lo < batch_size < hi:
        k = bisect.bisect_left(ss, batch_size)
        return CostSource(batch_size, "interpolated", ss, None,
                          f"interpolated between batches {ss[k - 1]} and {ss[k]}")
    side = "below" if batch_size < lo else "above"
    rng = f"{lo}" if lo == hi else f"{lo}-{hi}"
    if len(ss) == 1:
        how = f"per-sample cost of batch {lo} (the only measured batch)"
    elif rule == "trend":
        pair = ss[:2] if side == "below" else ss[-2:]
        how = f"trend: line through batches {pair[0]} and {pair[1]}"
    elif side == "below":
        how = ("conservative: highest per-sample cost of any measured batch, or the measured "
               "per-call overhead if higher")
    else:
        how = "conservative: lowest per-sample cost of any measured batch"
    noun = "batch sizes" if len(ss) > 1 else "batch size"
    return CostSource(batch_size, "extrapolated", ss, rule, f"{side} the measured {noun} {rng}; {how}")


# ------------------------------------------------------------------ scaling
def scale_points(points: Sequence[BatchPoint], batch_size: int,
                 rule: str) -> tuple[list[LayerProfile], float | None]:
    """Layers (and whole-model time) at ``batch_size`` from measured ``points``."""
    check_rule(rule)
    pts = sorted(points, key=lambda p: p.batch_size)
    sizes = [p.batch_size for p in pts]
    b = batch_size
    if b in sizes:
        pt = pts[sizes.index(b)]
        return list(pt.layers), pt.whole_model_s
    if sizes[0] < b < sizes[-1]:
        k = bisect.bisect_left(sizes, b)
        lo, hi = pts[k - 1], pts[k]
        w = (b - lo.batch_size) / (hi.batch_size - lo.batch_size)
        layers = [_lerp(x, y, w) for x, y in zip(lo.layers, hi.layers)]
        whole = (None if lo.whole_model_s is None or hi.whole_model_s is None
                 else lo.whole_model_s + w * (hi.whole_model_s - lo.whole_model_s))
        return layers, whole
    below = b < sizes[0]
    end = pts[0] if below else pts[-1]
    nxt = (pts[1] if below else pts[-2]) if len(pts) > 1 else None
    # the measured batch whose per-sample cost bounds the extrapolation (see the docstring)
    ref = _per_sample_extreme(pts, highest=below)

    def time_at(t_end: float, t_nxt: float | None, t_ref: float | None) -> float:
        if nxt is None or t_nxt is None or t_ref is None:  # one measured batch
            return t_end * b / end.batch_size
        return _extrapolate(rule, below, b, end.batch_size, t_end, nxt.batch_size, t_nxt,
                            ref.batch_size, t_ref)

    f = b / end.batch_size
    layers = []
    for i, lp in enumerate(end.layers):
        kw: dict[str, Any] = {}
        for name in _TIMES + _SPLIT_TIMES:
            if getattr(lp, name) is None:
                continue
            kw[name] = time_at(getattr(lp, name),
                               None if nxt is None else getattr(nxt.layers[i], name),
                               getattr(ref.layers[i], name))
        layers.append(replace(scale_counts(lp, f), **kw))
    whole = None
    if end.whole_model_s is not None:
        whole = time_at(end.whole_model_s, None if nxt is None else nxt.whole_model_s,
                        ref.whole_model_s)
    return layers, whole


def _per_sample_extreme(pts: Sequence[BatchPoint], *, highest: bool) -> BatchPoint:
    """The measured batch with the highest (or lowest) whole-model F+B per-sample cost.

    Whole-model, not per layer, so the noise of single layers is not cherry-picked.
    Ties go to the batch nearest the extrapolated side (smaller for highest).
    """
    def per_sample(p: BatchPoint) -> float:
        return sum(lp.forward_s + lp.backward_s for lp in p.layers) / p.batch_size

    if highest:
        return max(pts, key=lambda p: (per_sample(p), -p.batch_size))
    return min(pts, key=lambda p: (per_sample(p), -p.batch_size))


def _extrapolate(rule: str, below: bool, b: int, b_end: int, t_end: float, b_nxt: int,
                 t_nxt: float, b_ref: int, t_ref: float) -> float:
    """One time outside the measured range (see the module docstring); ``(b_ref, t_ref)``
    is the measured batch whose per-sample cost bounds it (highest below, lowest above)."""
    slope = (t_end - t_nxt) / (b_end - b_nxt)
    line = t_end + slope * (b - b_end)
    if below:
        if rule == "trend":
            return min(t_end, max(0.0, line))
        return min(t_end, max(t_ref * b / b_ref, line))
    if rule == "trend":
        return max(t_end, line)
    return max(t_end, t_ref * b / b_ref)


def _lerp(a: LayerProfile, b: LayerProfile, w: float) -> LayerProfile:
    kw: dict[str, Any] = {}
    for name in _TIMES + _SPLIT_TIMES + _COUNTS:
        va, vb = getattr(a, name), getattr(b, name)
        if va is None or vb is None:
            kw[name] = None
            continue
        v = va + w * (vb - va)
        kw[name] = round(v) if name in _COUNTS else v
    return replace(a, spread=None, **kw)


def scale_counts(lp: LayerProfile, factor: float) -> LayerProfile:
    """Activation bytes and FLOPs x ``factor`` (exact counts); times untouched."""
    kw: dict[str, Any] = {}
    for name in _COUNTS:
        v = getattr(lp, name)
        if v is not None:
            kw[name] = round(v * factor)
    return replace(lp, spread=None, **kw)
