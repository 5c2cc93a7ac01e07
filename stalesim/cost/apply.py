"""The cost model applied to a schedule: the one iteration-time predictor.

:func:`predict` is what ``simulate``, ``sweep`` and ``plan`` time a configuration with:
the profile and the link alone without a calibration (every calibrated term at its
documented default, :data:`stalesim.cost.calibration.TERMS`), else the machine's
calibrated terms through :func:`simulate_with_costs`, the function ``validate`` predicts
with (adding the terms it measures per model: contention, stage times, their spread).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stalesim.cost.memory import with_memory_facts
from stalesim.cost.model import (
    CostModel,
    action_jitter,
    has_contention,
    median_draw,
    wait_curves,
)
from stalesim.cost.terms import (
    dispatch_counts,
    link_from_comm,
    runtime_overheads,
    stage_costs_for,
)
from stalesim.validate.afterwait import wait_factors
from stalesim.validate.cores import busy_concurrency, busy_share, core_share
from stalesim.validate.stagetime import contention_by_batch, layout_key

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.cost.calibration import MachineCalibration
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions
    from stalesim.sim.model import SimHardware
    from stalesim.sim.result import SimResult
    from stalesim.workloads.profile import Profile


@dataclass(frozen=True)
class Predictor:
    """:func:`predict` with one calibration bound, called as ``simulate`` is: what a consumer
    below the cost model (the sweep's worker processes) is handed; picklable."""

    calibration: MachineCalibration | None = None

    def __call__(self, profile: Profile, cfg: ScheduleConfig, hw: SimHardware,
                 options: SimOptions | None = None) -> SimResult:
        return predict(profile, self.calibration, cfg, hw, options)


def predict(profile: Profile, calibration: MachineCalibration | None, cfg: ScheduleConfig,
            hw: SimHardware, options: SimOptions | None = None) -> SimResult:
    """The predicted run of ``cfg`` on ``hw`` with ``profile``'s costs and ``calibration``'s terms.

    Without a calibration: the simulator on the profile and the link (the terms' defaults,
    all zero). With one: :func:`simulate_with_costs` on the cost model of the profile and
    the calibration (:meth:`CostModel.from_calibration`), on the link the calibration's
    per-message costs leave (:func:`~stalesim.cost.terms.link_from_comm`), as ``validate``
    predicts. A calibration times one pipeline of local ranks by the event simulation: the
    closed form, replicas and clusters are refused rather than given terms they were not
    measured for.
    """
    from stalesim.errors import StalesimError
    from stalesim.sim import SimOptions, simulate

    opts = options or SimOptions()
    if calibration is None:
        return simulate(profile, cfg, hw, opts)
    if opts.method != "event":
        raise StalesimError("calibration: the calibrated terms need the event simulation (method event)")
    if opts.replicas > 1 or hw.cluster is not None:
        raise StalesimError("calibration: measured for one pipeline of local ranks; drop replicas/the cluster")
    opts.check()
    cm = CostModel.from_calibration(profile, calibration)
    link = link_from_comm(hw, calibration.comm, workers=cfg.workers)
    result, _ = simulate_with_costs(cm, link, cfg, ppv=None if opts.ppv is None else list(opts.ppv),
                                    batch_size=opts.batch_size or profile.batch_size,
                                    recv_ahead=opts.recv_ahead, options=opts)
    return result


def busy_overlap(result: SimResult) -> list[float]:
    """Per device: mean number of *other* devices computing while it computes, / (n-1).

    Read from the simulated timeline inside its steady window (1.0: the others
    are always busy when this one is; 0.0: they never overlap).
    """
    if result.timeline is None:
        raise ValueError("busy_overlap: needs an event-simulation result")
    n = result.devices
    if n <= 1:
        return [0.0] * n
    out = []
    for h in busy_concurrency(result):
        total = sum(h.values())
        out.append(sum(t * (k - 1) for k, t in h.items()) / total / (n - 1) if total else 0.0)
    return out


def stage_phi(sched: Any, overlap: list[float]) -> list[float]:
    """Device overlaps -> per-stage interpolation weights (stage s lives on device s,
    or every stage on every worker for data-parallel schedules)."""
    stages = sched.stages
    if not overlap:
        return [0.0] * stages
    if sched.data_parallel or len(overlap) != sched.num_devices:
        m = sum(overlap) / len(overlap)
        return [m] * stages
    return [overlap[sched.device_of(s, 0)] for s in range(stages)]  # virtual stages: their device



def simulate_with_costs(cm: CostModel, hw: SimHardware, cfg: Any, *, ppv: list[int] | None,
                        batch_size: int, rounds: int = 4, tol: float = 0.002,
                        memory_facts: list[dict[str, int]] | None = None,
                        recv_ahead: int = 1, options: SimOptions | None = None) -> tuple[SimResult, dict]:
    """Event-simulate the schedule of ``cfg`` (a ScheduleConfig, built once through the IR)
    with the cost model; contention by fixed-point iteration. ``memory_facts`` (per stage,
    measured) and ``recv_ahead`` (receives the runtime keeps posted) feed the memory model;
    ``options`` the rest of the simulation (the optimizer's state, the timeline; its
    partition and batch size are ``ppv`` and ``batch_size``).

    Returns the result and ``{"phi": per-stage weights, "rounds": n, "history": [...]}``.
    """
    from stalesim.schedule import build_schedule
    from stalesim.sim import SimOptions, simulate
    from stalesim.sim.model import resolve_cuts

    # the contention's fixed point reads the timeline (busy_overlap): always kept
    base = replace(options or SimOptions(), ppv=None, batch_size=None, method="event", recv_ahead=recv_ahead,
                   keep_timeline=True)
    sched = build_schedule(cfg)
    S = sched.stages
    ab = sched.action_batch_size(batch_size)
    cuts, ppv_used = resolve_cuts(cm.profile, S, ppv if S > 1 else None, batch_size)
    phi = [0.0] * S
    history: list[float] = []
    result = None
    # the per-kind gaps (cm.gaps_s) replace the older single dispatch gap charged to compute
    dispatch = dispatch_counts(sched) if cm.dispatch_s > 0 and not cm.gaps_s else None
    times = cm.stage_times.get(layout_key(sched, ppv_used, batch_size))
    if times is not None:  # the means over every round of every pass (the per-pass means kept
        # beside them feed the prediction noise, not the prediction: docs/validate.md), with the
        # contention pooled over the layouts at this action batch (stagetime.contention_by_batch)
        times = times.pooled()
        pooled = contention_by_batch(cm.stage_times).get(ab)
        if pooled is not None:
            times = times.with_contention(pooled)
    curves = wait_curves(times)
    waits: dict[tuple[str, int], float] = {}
    slices = _time_slices(cm, sched)
    share: list[float] | None = None
    for r in range(max(1, rounds)):
        costs = stage_costs_for(cm, cuts, ppv_used, batch_size=batch_size, action_batch=ab, phi=phi,
                                dispatch=dispatch, times=times, waits=waits, share=share,
                                full_share=slices[1] if slices else 1.0)
        costs = runtime_overheads(cm, sched, costs, recv_ahead=recv_ahead,
                                  label_bytes=8 * (batch_size // max(1, sched.workers)))
        costs = with_memory_facts(costs, memory_facts)
        result = simulate(costs, sched, hw, base)
        history.append(result.iteration_time_s)
        if not (has_contention(cm, times) or curves or slices) or result.devices <= 1:
            break
        new_phi = stage_phi(sched, busy_overlap(result))
        if r > 0 and len(history) >= 2 and abs(history[-1] - history[-2]) <= tol * history[-2]:
            break
        phi = new_phi
        if slices:
            share = stage_phi(sched, busy_share(result, cm.host_cores, slices[0]))
        if curves:
            waits = wait_factors(result, curves)
    assert result is not None
    jitter = action_jitter(times)
    drawn: list[float] = []
    if jitter is not None and result.devices > 1:  # one device never waits on another
        result, drawn = median_draw(lambda j: simulate(costs, sched, hw, replace(base, jitter=j)),
                                    jitter)
    return result, {"phi": phi, "core_share": share, "rounds": len(history), "history": history,
                    "mean_costs_s": history[-1], "jitter_draws_s": drawn,
                    "jitter_spread": {} if jitter is None else jitter.spread(),
                    "wait_factors": {f"{k}:{s}": f for (k, s), f in sorted(waits.items())},
                    "cuts": list(cuts), "ppv": list(ppv_used), "action_batch": ab, "costs": costs,
                    "schedule": sched}


def _time_slices(cm: CostModel, sched: Any) -> tuple[int, float] | None:
    """``(threads per rank, the share its contended times were measured in)`` where the ranks
    of ``sched`` outnumber ``cm.host_cores`` (:mod:`stalesim.validate.cores`), else None."""
    threads = int(cm.profile.threads or 1)
    full = core_share(sched.num_devices, cm.host_cores, threads)
    return (threads, full) if full > 1.0 else None
