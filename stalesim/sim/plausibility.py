"""The plausibility pass: no prediction crosses a physical limit without saying why.

``simulate()`` calls :func:`finish` once on every result. It records where the
costs came from (measured, interpolated, extrapolated outside the profiled
batch sizes, roofline estimate, or given by hand) and checks the physical
limits a user choosing hardware relies on:

1. **speed-up <= devices**: one device could run the same actions one after
   another, so N devices beat it by more than N only if the configuration's
   actions are cheaper per sample than the one-device baseline's (a smaller
   batch that runs more efficiently). That can be measured (cache effects on a
   CPU, or noise), but never extrapolated; the warning names the batch sizes,
   their per-sample costs and where each came from.
2. **utilization in [0, 1]**: a device busy for longer than the window means
   the simulator double-booked it; reported and clipped.
3. **memory >= weights held**: a device holds at least one copy of the
   weights of every stage placed on it. Also, where the device's memory is
   known, a peak above it is reported (the configuration does not fit).
4. **iteration time >= the busiest device's compute per mini-batch**: no
   device can finish a mini-batch faster than its own work on it.

A violation is a line in ``SimResult.warnings`` naming the cause; nothing is
silently clipped. The checks read only the result, the stage costs, the IR and
the hardware, so they hold for any schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stalesim.schedule.actions import COMPUTE_KIND_NAMES
from stalesim.sim.model import NS
from stalesim.units import fmt_bytes
from stalesim.workloads.scaling import worst_source

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.schedule.ir import Schedule
    from stalesim.sim.model import SimHardware, StageCosts
    from stalesim.sim.result import SimResult

REL_TOL = 1e-6  # integer-ns rounding: a limit counts as crossed beyond this
SPEEDUP = "speed-up "  # how every speed-up warning starts (see without_speedup)


def finish(result: SimResult, costs: StageCosts, sched: Schedule, hw: SimHardware | None = None) -> SimResult:
    """Fill ``cost_source``/``cost_detail``/``warnings`` of ``result`` (in place) and return it."""
    result.cost_source, result.cost_detail = cost_provenance(costs)
    note = cost_note(result.cost_detail)
    if note and note not in result.notes:
        result.notes.append(note)
    work = device_work_ns(sched, costs)
    warnings: list[str] = []
    warnings += check_utilization(result)
    warnings += check_iteration(result, work)
    warnings += check_speedup(result, costs, work)
    warnings += check_memory(result, costs, sched, hw)
    result.warnings = list(result.warnings) + [w for w in warnings if w not in result.warnings]
    return result


# ----------------------------------------------------------------- provenance
def cost_provenance(costs: StageCosts) -> tuple[str, dict[str, Any]]:
    """(worst source over the batch sizes used, detail) from the stage costs."""
    cs = costs.cost_source or {}
    if not cs:
        return "given", {"source": "given", "note": "stage costs given directly (no profile)"}
    src = worst_source([v.get("source", "") for v in cs.values()])
    detail: dict[str, Any] = {"source": src}
    for key in ("batch_size", "action_batch"):
        if key in cs:
            detail[key] = dict(cs[key])
    first = next(iter(cs.values()))
    detail["measured_batch_sizes"] = list(first.get("measured_batch_sizes") or [])
    detail["measured_range"] = first.get("measured_range")
    rules = {v.get("rule") for v in cs.values() if v.get("source") == "extrapolated"}
    detail["rule"] = next(iter(rules)) if len(rules) == 1 else None
    return src, detail


def cost_note(detail: dict[str, Any]) -> str:
    """One line for the text summary when any cost is not measured (empty otherwise)."""
    src = detail.get("source")
    if src in (None, "given", "measured"):
        return ""
    parts = []
    seen = set()
    for key, what in (("action_batch", "action batch"), ("batch_size", "mini-batch")):
        d = detail.get(key)
        if not d or d.get("source") == "measured" or d["batch_size"] in seen:
            continue
        seen.add(d["batch_size"])
        parts.append(f"{what} {d['batch_size']}: {d.get('basis') or d.get('source')}")
    if not parts:
        return ""
    lead = {"extrapolated": "costs EXTRAPOLATED outside the profiled batch sizes",
            "interpolated": "costs interpolated between profiled batch sizes",
            "roofline": "costs estimated by roofline (not measured)"}.get(str(src), f"costs {src}")
    return f"{lead} ({'; '.join(parts)})"


# ----------------------------------------------------------------- work
def device_work_ns(sched: Schedule, costs: StageCosts) -> list[float]:
    """Per device: compute (F, B, I, W, U, LOSS) per mini-batch, averaged over the IR's batches.

    The same durations the engine charges (``f_ns[stage]``, ...); communication
    and CPU time of transfers are not included, so this is a lower bound on
    what a device does per mini-batch.
    """
    bi, bw = costs.split_ns()  # a split backward's halves: the durations the engine charges
    table = {"F": costs.f_ns, "B": costs.b_ns, "I": bi, "W": bw, "U": costs.u_ns}
    n = max(1, int(sched.batches))
    out = []
    for acts in sched.device_actions:
        tot = 0
        for a in acts:
            k = a.kind.value
            if k in table:
                tot += table[k][a.stage]
            elif k == "LOSS":
                tot += costs.loss_ns
        out.append(tot / n)
    return out


# ----------------------------------------------------------------- checks
def check_utilization(result: SimResult) -> list[str]:
    """Utilization outside [0, 1]: clip it and say which device and why."""
    out = []
    fixed = []
    for d, u in enumerate(result.utilization):
        if u > 1 + REL_TOL or u < -REL_TOL:
            why = ("the device is busy longer than the steady-state window: compute and the CPU "
                   "time of transfers overlap on one core (a simulator defect)"
                   if result.method == "event" else
                   "the closed-form iteration time is shorter than the device's work (fast-path "
                   "formula does not bound this schedule)")
            out.append(f"utilization: device {d} at {u:.4f} is outside [0, 1]; {why}; clipped")
        fixed.append(min(1.0, max(0.0, u)))
    if out:
        result.utilization = fixed
        result.bubble_fraction = max(0.0, 1.0 - sum(fixed) / len(fixed)) if fixed else 0.0
    return out


def check_iteration(result: SimResult, work: Sequence[float]) -> list[str]:
    """Iteration time below the busiest device's compute per mini-batch."""
    if not work:
        return []
    d = max(range(len(work)), key=lambda i: work[i])
    need = work[d] / NS
    it = result.iteration_time_s
    if need > 0 and it < need * (1 - REL_TOL):
        where = (f"the steady-state window (batches {result.steady_window[0]}..{result.steady_window[1]})"
                 if result.steady_window else "the closed-form iteration time")
        return [(f"iteration time {it * 1e3:.4g} ms is below device {d}'s compute per mini-batch "
                f"({need * 1e3:.4g} ms); {where} does not cover a whole steady-state period")]
    return []


def check_speedup(result: SimResult, costs: StageCosts, work: Sequence[float]) -> list[str]:
    """Speed-up above the number of devices: name what makes the configuration cheaper."""
    n = max(1, int(result.devices))
    if not (result.speedup > n * (1 + REL_TOL)):
        return []
    total = sum(work)
    seq = costs.seq_ns
    head = (f"{SPEEDUP}{result.speedup:.3f}x exceeds the {n} device(s) used (super-linear)")
    if total <= 0 or total >= seq:
        return [(f"{head}: the iteration time ({result.iteration_time_s * 1e3:.4g} ms) is shorter "
                f"than the devices' work per mini-batch allows (total {total / NS * 1e3:.4g} ms over "
                f"{n} devices)")]
    B, ab = costs.batch_size, costs.action_batch
    cs = costs.cost_source or {}
    a_src, b_src = cs.get("action_batch", {}), cs.get("batch_size", {})
    why = (f"the configuration's compute per mini-batch ({total / NS * 1e3:.4g} ms on all devices) "
           f"is less than one device's sequential time ({seq / NS * 1e3:.4g} ms), i.e. a per-sample "
           f"cost of {total / B / 1e3:.4g} us at action batch {ab} vs {seq / B / 1e3:.4g} us at "
           f"batch {B}")
    if not cs:
        return [f"{head}: {why}; the stage costs were given directly, check their seq_ns"]
    srcs = (a_src.get("source"), b_src.get("source"))
    where = (f"batch {ab}: {a_src.get('basis', a_src.get('source'))}; "
             f"batch {B}: {b_src.get('basis', b_src.get('source'))}")
    if all(s in ("measured", "interpolated") for s in srcs):
        return [(f"{head}: {why}. Implied by the measured profile inside its range ({where}): "
                f"smaller batches ran cheaper per sample there (cache effects, or measurement noise)")]
    if "extrapolated" in srcs:
        return [(f"{head}: {why}, from costs extrapolated outside the profiled batch sizes ({where}); "
                f"profile at batch sizes {ab} and {B} to check")]
    return [f"{head}: {why} ({where})"]


def check_relative_speedup(result: SimResult, baseline: SimResult, devices: int) -> list[str]:
    """The speed-up limit for a caller that divides two results (``baseline`` on one device).

    Work per mini-batch is read from the results themselves (sum of per-device
    utilization x iteration time), so it holds for any cost model; the cause
    names the cost sources of the configuration's action batch and of the
    baseline's batch.
    """
    it = result.iteration_time_s
    if not (it > 0 and baseline.iteration_time_s > 0):
        return []
    sp = baseline.iteration_time_s / it
    n = max(1, int(devices))
    if not sp > n * (1 + REL_TOL):
        return []
    head = f"{SPEEDUP}{sp:.3f}x exceeds the {n} device(s) used (super-linear)"
    busy = sum(result.utilization) * it
    if busy >= baseline.iteration_time_s:
        return [(f"{head}: the devices' busy time per mini-batch ({busy * 1e3:.4g} ms) is not below "
                f"the baseline's ({baseline.iteration_time_s * 1e3:.4g} ms), so the iteration time is "
                f"too short for the work")]
    a = result.cost_detail.get("action_batch", {})
    b = baseline.cost_detail.get("batch_size", {})
    why = (f"the configuration computes {busy * 1e3:.4g} ms per mini-batch on all devices, less than "
           f"the one-device baseline's {baseline.iteration_time_s * 1e3:.4g} ms")
    if not a or not b:
        return [f"{head}: {why}"]
    where = (f"batch {a['batch_size']}: {a.get('basis') or a.get('source')}; "
             f"batch {b['batch_size']}: {b.get('basis') or b.get('source')}")
    if {a.get("source"), b.get("source")} <= {"measured", "interpolated"}:
        return [(f"{head}: {why}. Implied by the measured profile inside its range ({where}): "
                f"smaller batches ran cheaper per sample there (cache effects, or measurement noise)")]
    return [f"{head}: {why}, with costs from {where}"]


def without_speedup(warnings: Sequence[str]) -> list[str]:
    """``warnings`` less the speed-up ones: for a caller that defines its own speed-up
    (another baseline) and checks it with :func:`check_relative_speedup` instead."""
    return [w for w in warnings if not w.startswith(SPEEDUP)]


def check_memory(result: SimResult, costs: StageCosts, sched: Schedule,
                 hw: SimHardware | None) -> list[str]:
    """Peak memory below the weights a device holds, or above the device's memory."""
    out = []
    held: list[set[tuple[int, int]]] = [set() for _ in range(len(result.peak_memory_bytes))]
    for d, acts in enumerate(sched.device_actions):
        if d >= len(held):
            break
        for a in acts:
            if a.kind.value in COMPUTE_KIND_NAMES:
                held[d].add((a.worker, a.stage))
    for d, peak in enumerate(result.peak_memory_bytes):
        need = sum(costs.param_bytes[s] for _w, s in held[d])
        if peak < need:
            stages = sorted({s for _w, s in held[d]})
            out.append(f"memory: device {d} peak {peak} B is below the weights it holds ({need} B "
                       f"for stages {stages}); the memory model left out a stage placed on it")
    cap = getattr(hw, "memory_bytes", None) if hw is not None else None
    if cap and result.peak_memory_bytes:
        over = [d for d, p in enumerate(result.peak_memory_bytes) if p > cap]
        if over:
            worst = max(result.peak_memory_bytes)
            out.append(f"memory: device(s) {over} need up to {fmt_bytes(worst)}, more than the "
                       f"{fmt_bytes(cap)} of {getattr(hw, 'device', 'the device')}: this configuration "
                       f"does not fit (more stages, micro-batches or a smaller batch)")
    return out
