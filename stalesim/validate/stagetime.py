"""Per-stage action times measured on the run's real stages, as the executor runs them.

Why not sum the per-layer profile: the profiler times each block alone, warm, one after
another, so a block's working set is in the cache when it is timed. A stage runs its
blocks back to back and its backward starts after the whole forward: at batch 64 a
ResNet-32 stage of six residual blocks measured a backward of 97-104 ms in the executor
while its blocks' profiled backwards summed to 130 ms (the block timed first the
slowest), and at micro-batch 16 the same sum was right. Short chunks go the other way:
an action of a 2-3-block chunk pays fixed per-action costs (the autograd graph walk,
accumulating into the gradient buffer, the hooks) that a per-block profile spreads over
its blocks. Neither is a per-schedule factor: both come from running a stage as a stage.

So ``validate`` times each stage layout it predicts, with no schedule run: the run's
own :class:`~stalesim.runtime.stage.StageRuntime` per stage (its version hooks where
the run needs them, its split backward where the run splits, its auxiliary heads), at
the run's action batch, in rounds that go through the whole model
the way one batch does in a pipeline (every stage's F on a fresh copy of the previous
stage's output, the LOSS, then every stage's B, or I then W, on a fresh copy of the next
stage's input gradient; a stage the run splits alternates B rounds with I-then-W rounds,
since such a stage runs both), each layout in a fresh process, in passes that rotate over
the layouts and that ``validate`` spreads between the rounds of its measured runs
(:class:`LayoutTimer`). On CPU ranks every pass times each layout twice, alone and while
co-runners keep the other cores busy (*contended*), because two processes computing on
one socket can slow each other, by an amount that on a virtual machine comes and goes
with the host's other tenants. A kind's time is the mean over the rounds after each
process's two warm-up rounds; the median and quartiles are kept beside it, and each round's
time over its own pass's mean (:func:`round_ratios`: the spread of one action around its mean
within one moment of the machine, which the prediction draws action times from,
:mod:`stalesim.sim.jitter`). The per-layer profile still chooses the partition and gives the
update (:mod:`costmodel`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED, VERSIONED_KINDS, Kind
from stalesim.sim.jitter import measured_ratio

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.validate.corunners import CoRunners

WARMUP_ROUNDS = 2
#: the waits (seconds) before each action of the after-wait rounds, timed with co-runners
#: busy (:mod:`stalesim.validate.afterwait`): short, about one action, and long enough for
#: the other rank to have replaced what the caches held
WAITS_S = (0.005, 0.025)
#: the kinds that run a stage's modules (F, B, I, W; not the LOSS, the update or reading data)
MODULE_KINDS = tuple(k for k in COMPUTE_NAMES_ORDERED if Kind(k) in VERSIONED_KINDS)
#: per stage, ``{kind: [seconds of each timed round]}``
Samples = list[dict[str, list[float]]]
#: per wait (seconds), the :data:`Samples` of the actions timed each after that wait
WaitSamples = dict[float, Samples]
#: per pass, per stage ``{kind: mean seconds over that pass's rounds}``
PassMeans = list[list[dict[str, float]]]
#: per compute kind, each timed round's time over its pass's mean for the same stage
RoundRatios = dict[str, list[float]]


@dataclass(frozen=True)
class LayoutKey:
    """What a stage's action times depend on besides the model and the machine."""

    ppv: tuple[int, ...]
    action_batch: int
    split: tuple[bool, ...]  # per stage: the run splits its backward into I and W
    hooked: tuple[bool, ...]  # per stage: the run keeps its forwards under the version hooks
    local_loss: bool  # every stage has an auxiliary head and a LOSS

    def to_dict(self) -> dict[str, Any]:
        return {"ppv": list(self.ppv), "action_batch": self.action_batch, "split": list(self.split),
                "hooked": list(self.hooked), "local_loss": self.local_loss}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayoutKey:
        return cls(tuple(int(x) for x in d["ppv"]), int(d["action_batch"]), tuple(bool(x) for x in d["split"]),
                   tuple(bool(x) for x in d["hooked"]), bool(d["local_loss"]))

    def text(self) -> str:
        """The key as summary.json writes it."""
        flags = "".join("s" if sp else ("h" if h else "-") for sp, h in zip(self.split, self.hooked))
        return (f"ppv={list(self.ppv)} batch={self.action_batch} stages={flags}"
                + (" local" if self.local_loss else ""))


@dataclass
class StageTimes:
    """Per stage ``{kind: seconds}``: the means over ``rounds`` (what the cost model uses: an
    iteration adds its actions' times, so their means, as the replay does), and the median
    and quartiles beside them (the spread)."""

    mean_s: list[dict[str, float]]
    median_s: list[dict[str, float]] = field(default_factory=list)
    quartiles_s: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    rounds: int = 0
    # the same stages timed while co-runners kept the other cores busy (CPU ranks), in the
    # same passes as these: what a stage costs while the other ranks compute
    contended: StageTimes | None = None
    # per wait (seconds): the same stages, each action timed after that wait, in the same
    # processes and rounds as these back-to-back times (:mod:`stalesim.validate.afterwait`)
    after_wait: dict[float, StageTimes] = field(default_factory=dict)
    # per pass of a :class:`LayoutTimer` (each a fresh process at its own moment of the
    # machine), per stage, the mean of that pass's rounds: what an estimator that treats the
    # passes as repeats needs (the pooled means above weigh a slow pass like any rounds)
    pass_means_s: PassMeans = field(default_factory=list)
    # per compute kind, every round's time over its pass's mean for the same stage, pooled
    # over stages and passes (:func:`round_ratios`): the spread the prediction draws from
    round_ratios: RoundRatios = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mean_s": self.mean_s, "median_s": self.median_s, "rounds": self.rounds,
                             "quartiles_s": [{k: list(v) for k, v in q.items()} for q in self.quartiles_s]}
        if self.pass_means_s:
            d["pass_means_s"] = self.pass_means_s
        if self.round_ratios:
            d["round_ratios"] = {k: list(v) for k, v in self.round_ratios.items()}
        if self.contended is not None:
            d["contended"] = self.contended.to_dict()
        if self.after_wait:
            d["after_wait"] = [{"wait_s": w, **t.to_dict()} for w, t in sorted(self.after_wait.items())]
        return d

    def wait_ratios(self) -> dict[str, list[tuple[float, float]]]:
        """Per kind that runs the stage's modules: ``[(wait, after-wait over back-to-back
        time), ...]`` by wait, each summed over the stages both measured (a stage's actions
        are too few to give one each: 3-5% noise per action)."""
        out: dict[str, list[tuple[float, float]]] = {}
        for w, t in sorted(self.after_wait.items()):
            for k in MODULE_KINDS:
                r = _pooled_ratio(self.mean_s, t.mean_s, (k,))
                if r is not None:
                    out.setdefault(k, []).append((w, r))
        return out

    def contention_ratio(self) -> float | None:
        """Contended over alone time of every (stage, kind) both measured, summed (the LOSS
        and the data read left out: they do not run the stage's modules); None without
        contended times."""
        if self.contended is None:
            return None
        return _pooled_ratio(self.mean_s, self.contended.mean_s, MODULE_KINDS)

    def with_contention(self, ratio: float) -> StageTimes:
        """These times with every contended module-kind time (F, B, I, W) set to its alone time
        times ``ratio`` (:func:`contention_by_batch`), the after-wait times moved by the same
        factor as their back-to-back times (the after-wait ratios stay those measured); the
        LOSS and the data read keep their own. Unchanged without contended times."""
        from dataclasses import replace

        c = self.contended
        if c is None:
            return self
        means = [{k: (a[k] * ratio if k in MODULE_KINDS and k in a else v) for k, v in m.items()}
                 for a, m in zip(self.mean_s, c.mean_s)]
        return replace(self, contended=replace(c, mean_s=means, after_wait=c._waits_moved_to(means)))

    def _waits_moved_to(self, means: list[dict[str, float]]) -> dict[float, StageTimes]:
        """The after-wait times moved by the factor that takes these back-to-back means to
        ``means``, so that the after-wait ratios stay those the same processes measured."""
        from dataclasses import replace

        scale = [{k: (v / old[k]) if old[k] > 0 else 1.0 for k, v in new.items()}
                 for old, new in zip(self.mean_s, means)]
        return {w: replace(t, mean_s=[{k: v * sc.get(k, 1.0) for k, v in m.items()} for m, sc in zip(t.mean_s, scale)])
                for w, t in self.after_wait.items()}

    def with_pass_medians(self) -> StageTimes:
        """Each (stage, kind)'s mean replaced by the median over the passes of that pass's mean,
        here and in the contended times: a pass is a fresh process at its own moment of the
        machine, as a measured run's repeat is, and ``validate`` reports the median repeat.
        Tried as the cost model's estimate and not adopted (better on one run, worse on
        another: docs/validate.md); ``experiments/bench_stage_estimators.py`` compares the two.
        With fewer than three passes (a median of two is their mean) the pooled means."""
        return self._from_passes(lambda xs: statistics.median(xs) if len(xs) >= 3 else None)

    def of_pass(self, k: int) -> StageTimes:
        """These times as pass ``k`` alone measured them (a kind pass ``k`` lacks keeps the
        pooled mean): predicting from each pass in turn shows how far the prediction moves
        with the moment its stage times were taken."""
        return self._from_passes(lambda xs: xs[k] if k < len(xs) else None, keep_missing=True)

    def pooled(self) -> StageTimes:
        """The means over every round of every pass, as one estimate (the passes dropped): what
        the cost model predicts from."""
        return self._from_passes(lambda _xs: None)

    def _from_passes(self, reduce: Callable[[list[float]], float | None], *,
                     keep_missing: bool = False) -> StageTimes:
        """One estimate per (stage, kind): ``reduce`` of its per-pass means (None: the pooled
        mean), here and in the contended times; the result keeps no passes (so reducing it
        again changes nothing). The after-wait means move by the same factor, so the
        after-wait ratios stay those the same processes measured."""
        from dataclasses import replace

        def value(s: int, k: str) -> float:
            xs = [p[s].get(k) for p in self.pass_means_s]
            got = reduce([x if x is not None else self.mean_s[s][k] for x in xs] if keep_missing
                         else [x for x in xs if x is not None])
            return self.mean_s[s][k] if got is None else got

        means = [{k: value(s, k) for k in m} for s, m in enumerate(self.mean_s)] if self.pass_means_s else self.mean_s
        return replace(self, mean_s=means, after_wait=self._waits_moved_to(means), pass_means_s=[],
                       contended=None if self.contended is None
                       else self.contended._from_passes(reduce, keep_missing=keep_missing))

    @classmethod
    def from_samples(cls, samples: Samples, contended: Samples | None = None,
                     after_wait: WaitSamples | None = None,
                     contended_after_wait: WaitSamples | None = None, *,
                     pass_means: PassMeans | None = None,
                     contended_pass_means: PassMeans | None = None,
                     ratios: RoundRatios | None = None,
                     contended_ratios: RoundRatios | None = None) -> StageTimes:
        """Means, medians and quartiles of per-stage ``{kind: [seconds]}``; ``rounds``: the
        most samples of any kind; ``contended``: the same, timed with co-runners busy;
        ``after_wait`` / ``contended_after_wait``: per wait, the actions timed after it;
        ``pass_means`` / ``contended_pass_means`` and ``ratios`` / ``contended_ratios``: kept as
        they are (:func:`pass_means`, :func:`round_ratios`)."""
        return cls([{k: statistics.fmean(v) for k, v in s.items() if v} for s in samples],
                   [{k: statistics.median(v) for k, v in s.items() if v} for s in samples],
                   [{k: _quartiles(v) for k, v in s.items() if v} for s in samples],
                   max((len(v) for s in samples for v in s.values()), default=0),
                   None if contended is None else cls.from_samples(contended, after_wait=contended_after_wait,
                                                                   pass_means=contended_pass_means,
                                                                   ratios=contended_ratios),
                   {w: cls.from_samples(s) for w, s in (after_wait or {}).items()},
                   list(pass_means or []), {k: list(v) for k, v in (ratios or {}).items()})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageTimes:
        def per_stage(key: str) -> list[dict[str, float]]:
            return [{k: float(v) for k, v in m.items()} for m in d.get(key, [])]

        return cls(per_stage("mean_s"), per_stage("median_s"),
                   [{k: (float(v[0]), float(v[1])) for k, v in q.items()} for q in d.get("quartiles_s", [])],
                   int(d.get("rounds", 0)), cls.from_dict(d["contended"]) if d.get("contended") else None,
                   {float(e["wait_s"]): cls.from_dict(e) for e in d.get("after_wait", [])},
                   [[{k: float(v) for k, v in m.items()} for m in p] for p in d.get("pass_means_s", [])],
                   {k: [float(x) for x in v] for k, v in (d.get("round_ratios") or {}).items()})


def contention_by_batch(times: Mapping[LayoutKey, StageTimes]) -> dict[int, float]:
    """Per action batch, contended over alone time summed over every layout timed at that
    batch, their stages and module kinds (:meth:`StageTimes.contention_ratio` pooled).

    Why pooled: how much a co-runner slows a stage is a matter of what the two processes
    compute (the model, the batch: the working sets that share the caches and the memory
    bus), not of a layout's hooks or split; yet each layout's own ratio comes from a few
    contended rounds per pass and moved by up to 0.2 between layouts of one run whose stages
    differ only in their hooks (a char-GPT on 2 vCPUs: 1.02 and 1.27 for the same cut and
    batch). Pooled over the layouts at one batch, the noise averages out and the layouts
    keep their own alone times (docs/validate.md)."""
    by: dict[int, tuple[list[dict[str, float]], list[dict[str, float]]]] = {}
    for key, t in times.items():
        if t.contended is not None:
            alone, busy = by.setdefault(key.action_batch, ([], []))
            alone.extend(t.mean_s)
            busy.extend(t.contended.mean_s)
    return {b: r for b, (alone, busy) in by.items() if (r := _pooled_ratio(alone, busy, MODULE_KINDS)) is not None}


def pass_means(samples: Samples) -> list[dict[str, float]]:
    """Per stage, the mean of each kind's samples (one pass's entry of ``pass_means_s``)."""
    return [{k: statistics.fmean(v) for k, v in s.items() if v} for s in samples]


def round_ratios(samples: Samples) -> RoundRatios:
    """One pass's samples as times over their mean: per compute kind (the data read left out:
    it is part of stage 0's F), every round of every stage with at least two rounds,
    ``1 + (t / mean - 1) * sqrt(n / (n - 1))``. Over the pass's own mean, because a pass is one
    moment of the machine: the drift between passes moves every action at once, which is not
    the spread of one action against another. The factor undoes the shrinking of deviations
    measured from n samples' own mean (their variance is (n - 1) / n of the true one)."""
    out: RoundRatios = {}
    for stage in samples:
        for k, xs in stage.items():
            if k not in COMPUTE_NAMES_ORDERED or len(xs) < 2:
                continue
            m = statistics.fmean(xs)
            if m <= 0:
                continue
            c = math.sqrt(len(xs) / (len(xs) - 1))
            out.setdefault(k, []).extend(measured_ratio(1.0 + (x / m - 1.0) * c) for x in xs)
    return out


def _extend(into: RoundRatios, more: RoundRatios) -> None:
    for k, v in more.items():
        into.setdefault(k, []).extend(v)


def _pooled_ratio(base: list[dict[str, float]], other: list[dict[str, float]],
                  kinds: Sequence[str]) -> float | None:
    """Sum of ``other`` over sum of ``base`` for every (stage, kind of ``kinds``) both have."""
    pairs = [(a[k], c[k]) for a, c in zip(base, other) for k in a.keys() & c.keys() if k in kinds]
    total = sum(a for a, _c in pairs)
    return sum(c for _a, c in pairs) / total if total > 0 else None


def stage_times_from_summary(entries: list[dict[str, Any]] | None) -> dict[LayoutKey, StageTimes]:
    """The cost model's ``stage_times`` as ``summary.json`` stores them, read back."""
    return {LayoutKey.from_dict(e["layout"]): StageTimes.from_dict(e) for e in entries or []}


def layout_key(sched: Any, ppv: list[int] | tuple[int, ...] | None, batch_size: int) -> LayoutKey:
    """The :class:`LayoutKey` of ``sched`` cut at ``ppv`` with mini-batch ``batch_size``
    (validate's runs use no mitigation, so the schedule alone says which stages are hooked)."""
    split = sched.split_stages()
    return LayoutKey(ppv=tuple(ppv or ()), action_batch=sched.action_batch_size(batch_size),
                     split=tuple((0, s) in split for s in range(sched.stages)),
                     hooked=tuple(hooked_stages(sched)), local_loss=bool(sched.local_loss))


def hooked_stages(sched: Any) -> list[bool]:
    """Per stage: does it run under the version hooks (an update of it can fall between one
    of its forwards and that forward's backward, on any worker)?"""
    from stalesim.schedule.liveness import updates_during_backward_wait

    return [any(updates_during_backward_wait(sched, s, w) for w in range(sched.workers))
            for s in range(sched.stages)]


def measure_stage_times(tc: Any, *, device: str = "cpu", threads: int = 1, rounds: int = 12,
                        full_batch: int | None = None, fresh_process: bool = True) -> StageTimes:
    """Time every stage of the run ``tc`` (a TrainConfig) as its executor runs them (module
    doc): F, LOSS (loss stages), B or I and W per stage, plus ``DATA`` on stage 0 (reading
    one action batch of the run's data set out of a mini-batch of ``full_batch``).

    ``fresh_process`` (default): in a new process, as a rank starts (with a rank's heap
    policy, :mod:`stalesim.runtime.heap`). Measured inside
    ``validate``'s own process, after the profiles and calibrations had run there, the
    first stage's forward at batch 64 took 102-146 ms where a fresh process and the
    executor's ranks took 85-90 ms (ResNet-32; that process's heap, not the stage)."""
    job = (tc, device, threads, rounds, full_batch)
    return StageTimes.from_samples((_sample_fresh(*job) if fresh_process else _sample(*job))[0])


#: samples of each kind a layout gets over all its passes, alone and again contended
SAMPLES = 15


def rounds_per_pass(passes: int) -> int:
    """Timed rounds per pass so that ``passes`` passes give about :data:`SAMPLES` samples."""
    return max(3, math.ceil(SAMPLES / max(1, passes)))


@dataclass
class LayoutTimer:
    """Stage times of several runs' layouts (``tcs``: TrainConfigs), accumulated over passes
    that the caller spreads in time (``validate``: one pass after each round of measured
    runs, so the stage times see the same moments of the machine as the runs they predict).

    Why passes: on a shared or virtual machine the speed drifts by 10-15% over minutes;
    timing one layout after another put that drift between layouts (a stage that no layout
    change touched measured 13% slower in the next layout), and timing every layout before
    the runs put it between the prediction and the runs (ResNet-32 on 2 vCPUs: every
    schedule 4-9% slower than its stage times even where the ranks never computed at once).
    Each pass times every layout for ``rounds`` rounds in a fresh process, in an order
    rotated by one per pass; the samples of all passes are pooled."""

    tcs: Sequence[Any]
    device: str = "cpu"
    threads: int = 1
    rounds: int = 6
    full_batch: int | None = None
    # the ranks of the runs on this host: with STALESIM_PIN=on a timing process is pinned as
    # the first of them and the co-runners as the others (:mod:`stalesim.runtime.affinity`)
    ranks: int = 1
    passes: int = 0
    _alone: list[Samples | None] = field(default_factory=list, init=False, repr=False)
    _busy: list[Samples | None] = field(default_factory=list, init=False, repr=False)
    _busy_wait: list[WaitSamples] = field(default_factory=list, init=False, repr=False)
    _alone_passes: list[PassMeans] = field(default_factory=list, init=False, repr=False)
    _busy_passes: list[PassMeans] = field(default_factory=list, init=False, repr=False)
    _alone_ratios: list[RoundRatios] = field(default_factory=list, init=False, repr=False)
    _busy_ratios: list[RoundRatios] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._alone = [None] * len(self.tcs)
        self._busy = [None] * len(self.tcs)
        self._busy_wait = [{} for _ in self.tcs]
        self._alone_passes = [[] for _ in self.tcs]
        self._busy_passes = [[] for _ in self.tcs]
        self._alone_ratios = [{} for _ in self.tcs]
        self._busy_ratios = [{} for _ in self.tcs]

    def run_pass(self, corunners: CoRunners | None = None) -> None:
        """Time every layout once; with ``corunners`` (CPU ranks) every layout twice, alone
        (co-runners paused) and contended (co-runners computing, as the other ranks of a
        pipeline do), which of the two first alternating over layouts and, per layout,
        passes; the contended process also times every action after each wait of
        :data:`WAITS_S` (:mod:`stalesim.validate.afterwait`). Leaves the co-runners paused."""
        n, p = len(self.tcs), self.passes
        for j in range(n):
            i = (j + p) % n
            modes = [False] if corunners is None else ([True, False] if (i + p) % 2 else [False, True])
            for busy in modes:
                if corunners is not None and busy:
                    corunners.resume()
                elif corunners is not None:
                    corunners.pause()
                got, waited = _sample_fresh(self.tcs[i], self.device, self.threads, self.rounds,
                                            self.full_batch, not busy, ranks=self.ranks,
                                            waits=WAITS_S if busy else (), pass_index=p)
                store = self._busy if busy else self._alone
                have = store[i]
                store[i] = got if have is None else _merge(have, got)
                (self._busy_passes if busy else self._alone_passes)[i].append(pass_means(got))
                _extend((self._busy_ratios if busy else self._alone_ratios)[i], round_ratios(got))
                for w, got_w in waited.items():
                    had = self._busy_wait[i].get(w)
                    self._busy_wait[i][w] = got_w if had is None else _merge(had, got_w)
        if corunners is not None:
            corunners.pause()
        self.passes += 1

    def state(self) -> dict[str, Any]:
        """The samples of every pass so far as plain JSON data (``validate --resume``'s round
        files, :mod:`stalesim.validate.checkpoint`): the layouts are not in it, a resume
        builds them again from its own configuration and :meth:`restore` adds these."""
        return {"layouts": len(self.tcs), "passes": self.passes, "alone": self._alone, "busy": self._busy,
                "busy_wait": [[[w, ws[w]] for w in sorted(ws)] for ws in self._busy_wait],
                "alone_passes": self._alone_passes, "busy_passes": self._busy_passes,
                "alone_ratios": self._alone_ratios, "busy_ratios": self._busy_ratios}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take over the samples of :meth:`state` (checked by the round file's reader against
        :func:`stalesim.validate.checkpoint.check_timer_state`, for this many layouts)."""
        self.passes = int(state["passes"])
        self._alone = list(state["alone"])
        self._busy = list(state["busy"])
        self._busy_wait = [{float(w): s for w, s in ws} for ws in state["busy_wait"]]
        self._alone_passes = list(state["alone_passes"])
        self._busy_passes = list(state["busy_passes"])
        self._alone_ratios = list(state["alone_ratios"])
        self._busy_ratios = list(state["busy_ratios"])

    def times(self) -> list[StageTimes]:
        """Per layout: means, medians and quartiles over every pass so far, with the
        contended times beside them where any pass had co-runners."""
        return [StageTimes.from_samples(a or [], b, contended_after_wait=w, pass_means=ap,
                                        contended_pass_means=bp, ratios=ar, contended_ratios=br)
                for a, b, w, ap, bp, ar, br in zip(self._alone, self._busy, self._busy_wait, self._alone_passes,
                                                   self._busy_passes, self._alone_ratios, self._busy_ratios)]


def measure_layouts(tcs: Sequence[Any], *, device: str = "cpu", threads: int = 1, passes: int = 3,
                    rounds: int = 6, full_batch: int | None = None) -> list[StageTimes]:
    """:func:`measure_stage_times` for several runs' layouts, in ``passes`` passes one after
    the other (:class:`LayoutTimer`), alone."""
    timer = LayoutTimer(tcs, device, threads, rounds, full_batch)
    for _ in range(passes):
        timer.run_pass()
    return timer.times()


def _merge(a: Samples, b: Samples) -> Samples:
    return [{k: sa.get(k, []) + sb.get(k, []) for k in sa.keys() | sb.keys()} for sa, sb in zip(a, b)]


def _sample_fresh(tc: Any, device: str, threads: int, rounds: int, full_batch: int | None,
                  data: bool = True, *, ranks: int = 1, waits: Sequence[float] = (),
                  pass_index: int = 0) -> tuple[Samples, WaitSamples]:
    """:func:`_sample` in a new (spawned) process, set up as the first of ``ranks`` ranks."""
    from concurrent.futures import ProcessPoolExecutor

    from stalesim.lifetime import Parent, adopt, fresh_context

    # the sampling child dies with this process (a killed validation leaves no process timing on)
    with ProcessPoolExecutor(1, mp_context=fresh_context(), initializer=adopt,
                             initargs=(Parent.here(),)) as pool:
        return pool.submit(_sample_as_a_rank, tc, device, threads, rounds, full_batch, data, ranks,
                           tuple(waits), pass_index).result()


def _sample_as_a_rank(tc: Any, device: str, threads: int, rounds: int, full_batch: int | None,
                      data: bool = True, ranks: int = 1, waits: Sequence[float] = (),
                      pass_index: int = 0) -> tuple[Samples, WaitSamples]:  # pragma: no cover - a child
    """:func:`_sample` in a process set up as an executor rank is: its heap policy, and with
    ``STALESIM_PIN=on`` on CPU ranks pinned as rank 0 of ``ranks`` (as the executor pins its
    ranks then)."""
    from stalesim.runtime.affinity import pin_rank
    from stalesim.runtime.heap import keep_heap

    pin_rank(0, ranks, "cuda" if str(device).startswith("cuda") else "cpu")
    keep_heap()
    return _sample(tc, device, threads, rounds, full_batch, data, waits, pass_index)


def _sample(tc: Any, device: str, threads: int, rounds: int, full_batch: int | None,
            data: bool = True, waits: Sequence[float] = (), pass_index: int = 0
            ) -> tuple[Samples, WaitSamples]:
    """Per stage ``{kind: [seconds of each round after the warm-up]}``; with ``data``, stage 0's
    ``DATA`` too (one value: reading the data, timed alone only). With ``waits``, as many
    rounds again, alternating with those, each sleeping before every F, B, I and W a wait of
    ``waits`` in turn (starting at index ``pass_index``): per wait, their samples.

    Each round's backwards add their weight gradients into a buffer of the batch that already
    holds one, as a micro-batched run's every micro-batch but the first does
    (:func:`accumulates`), in the share of rounds the run has: that addition streams the whole
    gradient through memory, and a stage whose gradient outgrows the caches pays for it
    (AlexNet's fully connected stage at micro-batch 8: 48 ms a backward that adds, 35 ms one
    that does not)."""
    import torch

    from stalesim.runtime.build import build_stage_modules, model_of, stage_runtimes
    from stalesim.schedule import build_schedule
    from stalesim.validate.corunners import data_cost

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        n = rounds * (2 if waits else 1) + WARMUP_ROUNDS
        sched = build_schedule(tc.schedule_config(max(n, 2)))
        mods = build_stage_modules(tc, sched, model=model_of(tc.model, tc.dataset, seed=tc.seed))
        rts = stage_runtimes(tc, sched, mods, worker=0, stages=range(sched.stages), device=device, total=n)
        ab = sched.action_batch_size(tc.batch_size)
        x, y = mods.model.random_batch(ab, torch.Generator().manual_seed(0), tc.torch_dtype)
        clock = _clock(device)
        samples: Samples = [{} for _ in range(sched.stages)]
        waited: WaitSamples = {w: [{} for _ in range(sched.stages)] for w in waits}
        micro = 0 if sched.uses_micro else None
        per_batch = len(sched.micro_indices())
        for t in range(n):
            j = t - WARMUP_ROUNDS
            m = j // 2 if waits else j  # the m-th round of its sort (back to back, or waited)
            wait = waits[(pass_index + m) % len(waits)] if waits and j >= 0 and j % 2 else 0.0
            into = None if j < 0 else (waited[wait] if wait else samples)
            # a split stage alternates B rounds with I-then-W rounds within each sort of round,
            # so that every wait, and the back-to-back rounds, time both
            turn = t if not waits or j < 0 else (m // len(waits) if wait else m)
            # warm-up rounds add where any round does, to warm that path too
            acc = per_batch > 1 if j < 0 else accumulates(rounds * pass_index + m, per_batch)
            _one_round(rts, sched, x.to(device), y.to(device), t, micro, clock, into, wait, turn, acc)
        if data:
            samples[0]["DATA"] = [data_cost(tc.model, tc.dataset, tc.data_dir, full_batch or tc.batch_size, ab,
                                            rounds, tc.dtype)]
        return samples, {w: v for w, v in waited.items() if any(v)}
    finally:
        torch.set_num_threads(old)


def accumulates(position: int, per_batch: int) -> bool:
    """Whether the timed round at ``position`` (counted over a layout's passes, per sort of
    round) adds its gradients into the batch's buffer: in a run whose batches have
    ``per_batch`` micro-batches, every one but the first of each batch does, so
    ``per_batch - 1`` rounds in ``per_batch`` do, over consecutive passes as within one."""
    return position % per_batch != 0


def _one_round(rts: dict[int, Any], sched: Any, x: Any, y: Any, t: int, micro: int | None,
               clock: Callable[[], float], samples: Samples | None, wait_s: float = 0.0,
               turn: int | None = None, accumulate: bool = False) -> None:
    """One batch (``t``) through every stage: each F, its LOSS, then each backward in reverse
    (a split stage: B when ``turn``, default ``t``, is even, else I then W); with ``wait_s``,
    a sleep before each F, B, I and W (a rank waiting for its message). With ``accumulate``
    the batch's gradient buffers exist before the forwards (zeros, untimed), so the
    backwards add into them as a later micro-batch's do into its batch's buffer."""
    from stalesim.schedule import Action, Kind

    def timed(s: int, kind: str, fn: Callable[..., Any], *args: Any) -> Any:
        if wait_s and kind in MODULE_KINDS:
            clock()  # what the device had queued finishes before the wait, not in it
            time.sleep(wait_s)
        t0 = clock()
        out = fn(*args)
        if samples is not None:
            samples[s].setdefault(kind, []).append(clock() - t0)
        return out

    S = sched.stages
    if accumulate:
        for rt in rts.values():
            rt.grads(t)
    h = x
    for s in range(S):
        rt = rts[s]
        xin = h.detach().clone()  # a fresh buffer, as a received activation is
        if s > 0 and not sched.local_loss:
            xin.requires_grad_(True)
        h = timed(s, "F", rt.forward, Action(Kind.F, s, t, micro), xin)
        if rt.is_loss_stage:
            timed(s, "LOSS", rt.loss, Action(Kind.LOSS, s, t, micro), y)
    g = None
    for s in reversed(range(S)):
        rt = rts[s]
        gin = None if rt.is_loss_stage or g is None else g.detach().clone()
        if rt.split and (t if turn is None else turn) % 2 == 1:  # a split stage runs B too
            # (DualPipeV's overlapped pairs)
            g = timed(s, "I", rt.backward_input, Action(Kind.I, s, t, micro), gin)
            timed(s, "W", rt.backward_weight, Action(Kind.W, s, t, micro))
        else:
            g = timed(s, "B", rt.backward, Action(Kind.B, s, t, micro), gin)
        rt.buffers.clear()


def _clock(device: str) -> Callable[[], float]:
    """``perf_counter`` after the device finished its queued work (a GPU runs asynchronously)."""
    import torch

    if str(device).startswith("cuda"):
        dev = torch.device(device)

        def cuda_clock() -> float:
            torch.cuda.synchronize(dev)
            return time.perf_counter()
        return cuda_clock
    return time.perf_counter


def _quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0])
    q = statistics.quantiles(xs, n=4)
    return (q[0], q[2])
