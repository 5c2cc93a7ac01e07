"""The cost model: a profile plus the measured terms that turn a schedule into simulator costs.

A plain per-layer profile describes one process alone on the machine, calling blocks
directly. The ranks of a real run differ in general ways, each measured once per machine
(:class:`~stalesim.cost.calibration.MachineCalibration`: per-action runtime overhead, the
executor's gaps between actions, per-message CPU costs and the compute a message takes,
the host's cores) or once per model by ``validate`` (contention between ranks, stage times
of each layout, their spread); none is fitted per schedule. :mod:`stalesim.cost.terms`
turns them into per-stage costs, :mod:`stalesim.cost.apply` simulates a schedule with
them (the one predictor of ``simulate``, ``sweep``, ``plan`` and ``validate``).

* **Per-action runtime overhead** (``overhead_s[kind]``): a rank runs every F/LOSS/B/U
  through :class:`~stalesim.runtime.stage.StageRuntime` (saved-tensor hooks, version
  bookkeeping, a per-batch gradient buffer, ``autograd.grad``) and the executor's
  dispatcher; measured by :func:`stalesim.validate.corunners.measure_overhead` on a tiny
  stage, through the runtime minus the same arithmetic called directly.
* **Gaps between actions** (``gaps_s[kind]``, or the older single ``dispatch_s``): the
  executor loop's time after each action kind, the median gap of a 1-rank run.
* **Contention between ranks** on one CPU socket: a stage's cost is
  ``(1 - phi) * alone + phi * contended``, ``phi`` the fraction of the device's busy time
  during which the others are busy too, read from the simulated timeline and iterated to
  a fixed point (:func:`stalesim.cost.apply.simulate_with_costs`).
* **Action jitter** (:func:`action_jitter`): an action's time is a draw around its mean,
  and a pipeline's waits take the later of two draws, so mean costs alone are optimistic
  wherever devices wait on each other (:mod:`stalesim.sim.jitter`); the prediction is the
  median of :data:`JITTER_DRAWS` simulations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED, SPLIT_BACKWARD_KINDS
from stalesim.validate.stagetime import LayoutKey, StageTimes, contention_by_batch

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from stalesim.cost.calibration import MachineCalibration
    from stalesim.sim.jitter import ActionJitter
    from stalesim.sim.result import SimResult
    from stalesim.workloads.profile import Profile

KINDS = COMPUTE_NAMES_ORDERED  # F, B, U, LOSS, then I, W: the halves of a split backward
#: simulations with drawn action times per prediction; odd, so that the median is one
#: simulated run, whose timeline, utilization and attribution agree with its iteration time
JITTER_DRAWS = 5
#: the fewest rounds of a kind's spread the prediction draws from (fewer: that kind keeps its mean)
MIN_JITTER_SAMPLES = 6
_SPLIT = tuple(k.value for k in SPLIT_BACKWARD_KINDS)


@dataclass
class CostModel:
    """Everything needed to turn a schedule into per-stage simulator costs."""

    profile: Profile  # one rank alone, the ranks' thread count and device
    contended: Profile | None = None  # the same with the other ranks busy (CPU ranks)
    overhead_s: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in KINDS})
    notes: list[str] = field(default_factory=list)
    dispatch_s: float = 0.0  # executor loop time between two consecutive actions of a rank
    # the runtime's time after each action kind (dispatch loop, memory sample),
    # from the 1-rank run's gaps ("comm": after a send or receive), and the per-message
    # CPU costs and delays of :mod:`stalesim.validate.commcal` (None: not calibrated)
    gaps_s: dict[str, float] = field(default_factory=dict)
    comm: dict[str, Any] | None = None
    # each stage layout's action times measured on its real stages, as the executor runs them
    # (:mod:`stalesim.validate.stagetime`); where present they replace the per-layer sums and
    # the runtime overhead above, and they alone hold the version hooks' cost, the LOSS as the
    # runtime runs it and stage 0's data reading (a per-layer profile calls blocks directly)
    stage_times: dict[LayoutKey, StageTimes] = field(default_factory=dict)
    # the cores the CPU ranks share (their CPU affinity when the validation ran; None: not
    # known, or GPU ranks): with more ranks x threads than cores the contended times hold the
    # time slices the processes take turns in, charged by :mod:`stalesim.validate.cores`
    host_cores: int | None = None

    @classmethod
    def from_calibration(cls, profile: Profile, calibration: MachineCalibration | None) -> CostModel:
        """The cost model of ``profile`` with a machine's calibrated terms (None: every term at its
        documented default, :data:`stalesim.cost.calibration.TERMS`). The per-model terms (the
        contended profile, stage times) are validate's to add: a calibration holds none."""
        if calibration is None:
            return cls(profile)
        # as measured: a split backward's halves without their own take B's (stage_costs_for)
        return cls(profile, overhead_s=dict(calibration.overhead_s),
                   dispatch_s=calibration.dispatch_s, gaps_s=dict(calibration.gaps_s),
                   comm=None if calibration.comm is None else dict(calibration.comm),
                   host_cores=calibration.host_cores)

    def calibration(self, *, source: str) -> MachineCalibration:
        """The machine terms of this model, to store and reuse (what ``validate`` measured)."""
        from stalesim.cost.calibration import MachineCalibration

        return MachineCalibration(overhead_s={k: float(v) for k, v in self.overhead_s.items()},
                                  dispatch_s=float(self.dispatch_s),
                                  gaps_s={k: float(v) for k, v in self.gaps_s.items()},
                                  comm=self.comm, host_cores=self.host_cores,
                                  threads=self.profile.threads, device=self.profile.device, source=source)

    def contention_ratio(self, batch_size: int | None = None) -> float | None:
        """Sum of per-layer compute (F+B+U), contended over alone, at ``batch_size``."""
        if self.contended is None:
            return None
        b = batch_size or self.profile.batch_size
        a = sum(lp.compute_s for lp in self.profile.at_batch_size(b).layers)
        c = sum(lp.compute_s for lp in self.contended.at_batch_size(b).layers)
        return c / a if a > 0 else None

    def timing_passes(self) -> int:
        """How many timing passes kept their own means
        (:class:`~stalesim.validate.stagetime.LayoutTimer`; 0 when the stage times were not
        timed in passes)."""
        return max((len(t.pass_means_s) for t in self.stage_times.values()), default=0)

    def of_pass(self, k: int) -> CostModel:
        """This model with the stage times timing pass ``k`` alone measured
        (:meth:`StageTimes.of_pass`): what the prediction would have been at that moment."""
        return replace(self, stage_times={key: t.of_pass(k) for key, t in self.stage_times.items()})

    def with_pass_medians(self) -> CostModel:
        """This model with each stage time the median over its passes (:meth:`StageTimes.with_pass_medians`)."""
        return replace(self, stage_times={key: t.with_pass_medians() for key, t in self.stage_times.items()})

    def to_dict(self) -> dict[str, Any]:
        return {"overhead_s": dict(self.overhead_s), "dispatch_s": self.dispatch_s,
                "gaps_s": dict(self.gaps_s),
                "stage_times": [{"layout": k.to_dict(), "label": k.text(),
                                 "contention_ratio": v.contention_ratio(),
                                 "wait_ratios": {k: [list(p) for p in c] for k, c in wait_curves(v).items()},
                                 **v.to_dict()}
                                for k, v in self.stage_times.items()],
                "host_cores": self.host_cores,
                "comm": None if self.comm is None else {k: v for k, v in self.comm.items()
                                                        if k in ("sizes", "repeats", "device")
                                                        or isinstance(v, dict)},
                "contention_ratio": self.contention_ratio(),
                # what the prediction uses: per action batch, pooled over its layouts
                "contention_by_action_batch": {str(b): r for b, r in
                                               sorted(contention_by_batch(self.stage_times).items())},
                "has_contended_profile": self.contended is not None,
                "notes": list(self.notes)}



def median_draw(run: Callable[[ActionJitter], SimResult], jitter: ActionJitter) -> tuple[SimResult, list[float]]:
    """``run`` with :data:`JITTER_DRAWS` seeds of ``jitter``: the run of median iteration time
    (one simulated run: its timeline agrees with its time) and every draw's time, sorted."""
    runs = sorted((run(jitter.with_seed(k)) for k in range(JITTER_DRAWS)), key=lambda r: r.iteration_time_s)
    return runs[len(runs) // 2], [r.iteration_time_s for r in runs]


def action_jitter(times: StageTimes | None) -> ActionJitter | None:
    """The spread a layout's actions are drawn with (:mod:`stalesim.sim.jitter`): per compute
    kind, every round of its stage timing over its pass's mean, alone and contended pooled (a
    kind with fewer than :data:`MIN_JITTER_SAMPLES` keeps its mean); None without any (stage
    times from before the spread was kept, or no stage times)."""
    from stalesim.sim.jitter import ActionJitter

    if times is None:
        return None
    pooled: dict[str, list[float]] = {}
    for t in (times, times.contended):
        for k, v in (t.round_ratios.items() if t is not None else ()):
            pooled.setdefault(k, []).extend(v)
    ratios = {k: tuple(v) for k, v in pooled.items() if len(v) >= MIN_JITTER_SAMPLES}
    return ActionJitter(ratios) if ratios else None


def wait_curves(times: StageTimes | None) -> dict[str, list[tuple[float, float]]]:
    """The after-wait curves of a layout (:mod:`stalesim.validate.afterwait`): those measured
    with co-runners busy (a rank waits while another computes); none without them."""
    if times is None or times.contended is None:
        return {}
    return times.contended.wait_ratios()


def has_contention(cm: CostModel, times: StageTimes | None) -> bool:
    """Is there a contended cost to interpolate towards: the contended profile, or stage
    times measured with co-runners busy?"""
    return cm.contended is not None or (times is not None and times.contended is not None)
