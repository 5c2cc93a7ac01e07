"""Iterations to target: emulations (stored and reused), the first iteration that meets
the target per seed, and the interval over seeds.

**Target.** A loss target is met at the first iteration t at which the mean training
loss of the last ``smooth`` iterations (t included) is at or below it: one batch's loss
is noisy, and a run that dips below the target once has not reached it. An accuracy
target is met at the first evaluation of test accuracy at or above it; the emulator
evaluates at the end of every epoch, so accuracy runs are measured in epochs and the
answer is a whole number of epochs of iterations (use a loss target for a finer one).

**Interval.** Over seeds: the mean and the 95 % confidence interval of the mean,
mean +- t(0.975, n-1) s / sqrt(n) (Student's t; clipped to the seeds' range where
that is narrower than the seeds themselves show, never below 1 iteration). One seed has
no interval (lo = hi = the value, said in the note). A candidate counts as reaching
the target only when every seed does.

**Stopping.** Each candidate runs to a horizon; those not yet at the target whose loss
is still falling fast enough to get there within ``max_horizon`` run again with twice
the horizon, the others stop: reached (every seed), diverged, or out of reach (the last
half's mean loss is no lower than the first half's, or the linear trend between the
halves needs more than ``max_horizon`` iterations), or it cannot win (``stop``:
:mod:`stalesim.plan.early_stop`). A longer horizon continues the shorter run where
:func:`stalesim.plan.continuation.continuable` allows (the work is the final horizon's),
and reruns from scratch elsewhere (at most twice the final horizon's).

**Store.** Every emulation is stored in ``<out>/emulations/<key>/`` keyed by everything
that determines it (the training config but its length and data folder), so a plan for
other hardware, or a longer horizon, reuses it: a run of H' >= H iterations with a
length-independent learning rate (``constant``) answers for H (its first H losses are the
same bits: the IR's version table of a batch depends only on the batches before it).
Batched emulations are stored apart, and their crossings confirmed by single ones
(:mod:`stalesim.plan.confirm`: float32 batched kernels sum in another order).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stalesim.atomic import write_json_atomic
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig

# two-sided 95 % Student t quantiles t(0.975, df); beyond the table the normal 1.96
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}
#: the status of a candidate the early-stop rule stopped (stalesim.plan.early_stop)
CANNOT_WIN = "cannot win"
# fields that do not change what an emulation computes (where the data is read from) or
# that the store handles itself (the run length)
_NOT_KEYED = ("iterations", "epochs", "data_dir")


def t975(df: int) -> float:
    """t(0.975, df), conservative between table entries (the next smaller df's value)."""
    if df < 1:
        raise StalesimError(f"seeds: an interval needs at least 2 seeds (df = {df})")
    if df >= 120:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


@dataclass(frozen=True)
class Interval:
    """Mean and 95 % interval of a quantity over seeds (``n`` values)."""

    mean: float
    lo: float
    hi: float
    n: int

    def scaled(self, f: Callable[[float], float]) -> Interval:
        """The interval of a monotone increasing function of the quantity."""
        return Interval(f(self.mean), f(self.lo), f(self.hi), self.n)

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}


def seed_interval(values: Sequence[float]) -> Interval:
    """Mean +- t(0.975, n-1) s / sqrt(n), at least 1, no wider than the values allow to be
    hidden: the interval of the *mean* never extends past the values themselves when the
    t-interval is wider (two seeds give t = 12.7, an interval that says nothing)."""
    xs = [float(v) for v in values]
    if not xs:
        raise StalesimError("seeds: no values to make an interval of")
    m = statistics.fmean(xs)
    if len(xs) == 1:
        return Interval(m, m, m, 1)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    lo, hi = max(m - half, min(xs)), min(m + half, max(xs))
    return Interval(m, max(1.0, lo), max(1.0, hi), len(xs))


@dataclass(frozen=True)
class Target:
    """``kind`` ``loss`` (training loss, smoothed over ``smooth`` iterations) or
    ``accuracy`` (test accuracy at epoch ends)."""

    kind: str
    value: float
    smooth: int = 20

    @property
    def unit(self) -> str:
        """The unit of a horizon: iterations (loss) or epochs (accuracy)."""
        return "epochs" if self.kind == "accuracy" else "iterations"

    def describe(self) -> str:
        if self.kind == "accuracy":
            return f"test accuracy >= {self.value:g} (evaluated at epoch ends)"
        return f"training loss <= {self.value:g} (mean of the last {self.smooth} iterations)"


def iterations_to_loss(losses: Sequence[float | None], target: float, smooth: int) -> int | None:
    """The number of iterations after which the trailing mean of ``smooth`` losses first is
    <= ``target`` (None: never; a missing / non-finite loss ends the search: divergence)."""
    w = max(1, int(smooth))
    acc = 0.0
    seen: list[float] = []  # the losses so far, each checked finite
    for t, x in enumerate(losses):
        if x is None or not math.isfinite(x):
            return None
        seen.append(x)
        acc += x
        if t >= w:
            acc -= seen[t - w]
        if t + 1 >= w and acc / w <= target:
            return t + 1
    return None


def iterations_to_accuracy(epoch_metrics: Sequence[dict[str, Any]], batches_per_epoch: int,
                           target: float) -> int | None:
    """Iterations at the end of the first epoch whose test accuracy is >= ``target``."""
    for rec in epoch_metrics:
        ep, acc = rec.get("epoch"), rec.get("test_accuracy")
        if isinstance(ep, int) and acc is not None and acc >= target:
            return (ep + 1) * batches_per_epoch
    return None


def out_of_reach(losses: Sequence[float | None], target: float, max_iterations: int) -> bool:
    """The loss did not fall over the run, or its trend needs more than ``max_iterations`` to
    reach ``target`` (see the module doc). Halves, not quarters, are compared: a batch's loss
    is noisy and a short run's quarters are a few batches. Fewer than 16 losses say nothing."""
    xs = [x for x in losses if x is not None and math.isfinite(x)]
    if len(xs) < len(losses):
        return True  # a missing or non-finite loss: diverged
    if len(xs) < 16:
        return False
    h = len(xs) // 2
    first, second = statistics.fmean(xs[:h]), statistics.fmean(xs[-h:])
    last = statistics.fmean(xs[-max(1, len(xs) // 4):])
    if last <= target:
        return False
    if second >= first:
        return True
    rate = (first - second) / h  # loss per iteration, between the halves' centres
    return len(xs) + (last - target) / rate > max_iterations


def emulation_key(cfg: TrainConfig) -> str:
    """What determines an emulation but its length (see the module doc), hashed."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in _NOT_KEYED}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _length(cfg: TrainConfig) -> tuple[str, int]:
    return ("e", cfg.epochs) if cfg.epochs is not None else ("i", int(cfg.iterations or 0))


# what a stored emulation keeps of the emulator's summary (the rest is in its run folder)
_KEEP = ("schedule", "stages", "ppv", "microbatches", "workers", "seed", "iterations", "batches_per_epoch",
         "steps_done", "losses", "final_loss", "final_test_accuracy", "final_val_loss", "epoch_metrics",
         "staleness_ir", "diverged", "diverged_at", "wall_time_s", "data_note")


@dataclass
class EmulationStore:
    """Emulations on disk, keyed by :func:`emulation_key`; ``ran`` counts the emulations this
    store had to run (what a resumed plan must not repeat)."""

    root: Path
    ran: int = 0
    reused: int = 0
    #: batches the runs of this store trained (a continued run counts only its new ones)
    iterations_run: int = 0

    def _dir(self, cfg: TrainConfig) -> Path:
        return self.root / "emulations" / emulation_key(cfg)

    def get(self, cfg: TrainConfig) -> dict[str, Any] | None:
        """The stored emulation of ``cfg``, or a longer one cut to its length when the cut is
        the same run (constant learning rate, see the module doc)."""
        unit, n = _length(cfg)
        d = self._dir(cfg)
        exact = d / f"{unit}{n}.json"
        if exact.is_file():
            return self._read(exact)
        if cfg.lr_schedule != "constant" or not d.is_dir():
            return None
        longer = sorted((int(p.stem[1:]), p) for p in d.glob(f"{unit}*.json")
                        if p.stem[1:].isdigit() and int(p.stem[1:]) > n)
        for _, p in longer:
            rec = self._read(p)
            if rec is not None:
                return _cut(rec, unit, n)
        return None

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None  # a damaged entry is run again, not trusted
        return rec if isinstance(rec, dict) else None

    def put(self, cfg: TrainConfig, summary: dict[str, Any]) -> None:
        unit, n = _length(cfg)
        rec = {k: summary.get(k) for k in _KEEP}
        rec["config"] = cfg.to_dict()
        write_json_atomic(self._dir(cfg) / f"{unit}{n}.json", rec)

    def fetch(self, cfgs: Sequence[TrainConfig], run: Callable[[list[tuple[str, TrainConfig]]], list[dict]]
              ) -> dict[str, dict[str, Any]]:
        """Summaries of ``cfgs`` by run id: stored ones reused, the others run (``run`` gets
        the missing (run id, config) pairs) and stored."""
        out: dict[str, dict[str, Any]] = {}
        todo: list[tuple[str, TrainConfig]] = []
        for cfg in cfgs:
            rid = run_id(cfg)
            if rid in out or any(r == rid for r, _ in todo):
                continue
            rec = self.get(cfg)
            if rec is None:
                todo.append((rid, cfg))
            else:
                self.reused += 1
                out[rid] = rec
        if todo:
            by_id = dict(todo)
            for summary in run(todo):
                done_id = summary.get("run_id")
                if done_id in by_id:
                    self.put(by_id[done_id], summary)
                    self.iterations_run += int(summary.get("emulated_batches", summary.get("iterations")) or 0)
                    out[done_id] = self.get(by_id[done_id]) or summary
            self.ran += len(todo)
        return out


def run_id(cfg: TrainConfig) -> str:
    unit, n = _length(cfg)
    return f"{cfg.schedule}_{emulation_key(cfg)}_{unit}{n}"


def _cut(rec: dict[str, Any], unit: str, n: int) -> dict[str, Any]:
    """A longer run's record as the run of length ``n`` (``unit`` i: iterations, e: epochs)."""
    out = dict(rec)
    bpe = int(rec.get("batches_per_epoch") or 1)
    its = n if unit == "i" else n * bpe
    out["losses"] = list(rec.get("losses") or [])[:its]
    out["epoch_metrics"] = [m for m in rec.get("epoch_metrics") or []
                            if isinstance(m.get("epoch"), int) and m["epoch"] < (n if unit == "e" else its // bpe)]
    out["iterations"] = its
    if rec.get("diverged_at") is not None and rec["diverged_at"] >= its:
        out["diverged"], out["diverged_at"] = False, None
    return out


@dataclass
class Convergence:
    """One candidate's iterations to target over its seeds."""

    per_seed: list[int | None]
    horizon: int  # iterations of the longest emulation that decided it
    status: str  # reached | not reached | diverged | out of reach | cannot win | no result
    interval: Interval | None = None
    note: str = ""
    emulation_s: float = 0.0
    runs: list[str] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return self.status == "reached"

    def to_dict(self) -> dict[str, Any]:
        return {"per_seed": self.per_seed, "horizon": self.horizon, "status": self.status,
                "iterations": None if self.interval is None else self.interval.to_dict(),
                "note": self.note, "emulation_s": round(self.emulation_s, 2), "runs": self.runs}


def judge(summaries: Sequence[dict[str, Any]], target: Target, max_iterations: int) -> Convergence:
    """Decide one candidate from its seeds' summaries at the current horizon."""
    per_seed: list[int | None] = []
    diverged = False
    falling = False
    horizon = 0
    for s in summaries:
        losses = list(s.get("losses") or [])
        bpe = int(s.get("batches_per_epoch") or 1)
        horizon = max(horizon, int(s.get("iterations") or len(losses)))
        if target.kind == "accuracy":
            n = iterations_to_accuracy(s.get("epoch_metrics") or [], bpe, target.value)
        else:
            n = iterations_to_loss(losses, target.value, target.smooth)
        per_seed.append(n)
        if s.get("diverged"):
            diverged = True
        elif n is None and (target.kind == "accuracy" or not out_of_reach(losses, target.value, max_iterations)):
            falling = True
    wall = sum(float(s.get("wall_time_s") or 0.0) for s in summaries)
    got = [n for n in per_seed if n is not None]
    some = f"{len(got)}/{len(per_seed)} seeds reached ({', '.join(map(str, got))}); " if got else ""
    if all(n is not None for n in per_seed) and per_seed:
        iv = seed_interval([float(n) for n in per_seed if n is not None])
        note = "" if iv.n > 1 else "one seed: no interval"
        return Convergence(per_seed, horizon, "reached", iv, note, wall)
    if diverged:
        return Convergence(per_seed, horizon, "diverged", None, some + "a seed diverged (NaN/inf loss)", wall)
    if not any(s.get("losses") for s in summaries):  # nothing to extend: a longer run would say nothing more
        return Convergence(per_seed, horizon, "no result", None, "the emulations returned no losses", wall)
    if falling:
        return Convergence(per_seed, horizon, "not reached", None,
                           some + f"not reached by every seed within {horizon} iterations", wall)
    return Convergence(per_seed, horizon, "out of reach", None,
                       some + "the loss stopped falling (or its trend needs more than "
                       f"{max_iterations} iterations)", wall)


def converge(cands: Sequence[Any], configs: Callable[[Any, int], list[TrainConfig]], store: EmulationStore,
             run: Callable[[list[tuple[str, TrainConfig]]], list[dict]], target: Target, horizon: int,
             max_horizon: int, max_iterations: Callable[[int], int],
             log: Callable[[str], None] | None = None,
             stop: Callable[[dict[Any, Convergence]], dict[Any, str]] | None = None) -> dict[Any, Convergence]:
    """Iterations to target of every candidate, doubling the horizon of the undecided ones.

    ``configs(cand, horizon)``: the candidate's emulation configs (one per seed) at that
    horizon (in the target's unit); ``max_iterations(max_horizon)``: the same limit in
    iterations (for the out-of-reach trend); ``stop(results so far)``: candidate -> why it
    cannot win (:mod:`stalesim.plan.early_stop`), asked after each horizon of the ones that
    would go on; those stop with status :data:`CANNOT_WIN`."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    result: dict[Any, Convergence] = {}
    active = list(cands)
    h = horizon
    limit = max_iterations(max_horizon)
    while active:
        cfgs = {c: configs(c, h) for c in active}
        flat = [cfg for cs in cfgs.values() for cfg in cs]
        missing = len({run_id(c) for c in flat if store.get(c) is None})
        say(f"plan: horizon {h} {target.unit}: {len(active)} candidate(s), "
            f"{len({run_id(c) for c in flat})} emulation(s), {missing} to run")
        got = store.fetch(flat, run)
        nxt = []
        for c in active:
            sums = [got[run_id(cfg)] for cfg in cfgs[c]]
            conv = judge(sums, target, limit)
            conv.runs = [run_id(cfg) for cfg in cfgs[c]]
            result[c] = conv
            if conv.status == "not reached" and 2 * h <= max_horizon:
                nxt.append(c)
        why = stop(result) if stop is not None and nxt else {}
        for c in [c for c in nxt if why.get(c)]:
            old = result[c]
            result[c] = Convergence(old.per_seed, old.horizon, CANNOT_WIN, None, why[c], old.emulation_s, old.runs)
            nxt.remove(c)
        active, h = nxt, 2 * h
    return result
