"""``plan --check``: the prediction against a measured run on this machine.

For the best-ranked candidates of a plan made for this machine (a profile measured here,
``stalesim profile --device cpu --threads 1``, and the link ``stalesim calibrate``
measured, ``--hardware``), the executor runs each on real ranks (one process per device,
gloo) for exactly the iterations the emulation of the first seed needed to reach the
target. The executor reproduces the emulator's losses (docs/executor.md), so the run
reaches the target at that iteration too, which the check verifies from the executor's
own losses; its wall-clock time (first action to last, every rank) is the measured time
to target, and the plan's ``time(n)`` for the same n is the prediction. A run whose losses
never reach the target within n has no time to target: its record says so (``reached``
false, no error) and it is not counted within the goal, since its wall time measures n
iterations of a run that had not converged, not the time the plan predicts.

The error is split into two terms, so a miss names its cause: the **iteration time**
(n x the difference between the predicted and the measured steady-state iteration time)
and the **rest** (pipeline fill and drain, warm-up phase, the first iterations' start-up
that no steady state shows).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from stalesim.errors import StalesimError
from stalesim.plan.candidates import run_config
from stalesim.plan.compose import Row
from stalesim.plan.convergence import Target, iterations_to_loss
from stalesim.runtime.config import TrainConfig

# the check's goal (docs/plan.md): the predicted time to target within 10 % of the measured
GOAL = 0.10


def pick(rows: Sequence[Row], count: int, devices: int) -> list[Row]:
    """The ``count`` best-ranked rows on ``devices`` devices, one per schedule (the check
    compares schedules, not a schedule's policies); the one-device baseline when asked for
    one device only."""
    out: list[Row] = []
    seen: set[str] = set()
    for r in rows:
        c = r.candidate
        if r.rank is None or c.devices != devices or c.schedule in seen:
            continue
        if not r.convergence.per_seed or r.convergence.per_seed[0] is None:
            continue
        seen.add(c.schedule)
        out.append(r)
        if len(out) == count:
            break
    return out


def _load() -> list[float]:
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return [float(x) for x in fh.read().split()[:3]]
    except OSError:
        return []


def check_rows(rows: Sequence[Row], base: TrainConfig, target: Target, seed: int, *, devices: int,
               timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Run each row's candidate on ``cpu:devices`` to the target; one record per row."""
    from stalesim.executor import make_job, run_local

    if target.kind != "loss":
        raise StalesimError("check: compares time to a loss target (--target-loss); accuracy is evaluated "
                            "only at epoch ends")
    records = []
    for r in rows:
        n = int(r.convergence.per_seed[0])  # type: ignore[arg-type]
        cfg = run_config(base, r.candidate, seed=seed, iterations=n)
        t = r.timing
        assert t is not None
        print(f"plan: check {r.candidate.label}: {n} iterations on cpu:{devices}", file=sys.stderr, flush=True)
        before = _load()
        summary = run_local(make_job(cfg, evaluate=False, label=r.candidate.label), f"cpu:{devices}",
                            timeout_s=timeout_s)
        after = _load()
        measured = float(summary.get("wall_s") or 0.0)
        predicted = t.time_for(n)
        exec_n = iterations_to_loss(summary.get("losses") or [], target.value, target.smooth)
        meas_it = float(summary.get("iteration_time_s") or 0.0)
        it_term = n * (t.steady_s - meas_it) if meas_it else None
        reached = exec_n is not None and exec_n <= n
        total = predicted - measured
        rest = None if it_term is None else total - it_term
        err = total / measured if measured > 0 and reached else None
        dominant = None
        if it_term is not None and rest is not None:
            dominant = "iteration time" if abs(it_term) >= abs(rest) else \
                "fill/drain, warm-up and start-up (not the steady iteration)"
        records.append({
            "candidate": r.candidate.label, "schedule": r.candidate.schedule, "iterations": n,
            "executor_iterations_to_target": exec_n, "same_iteration": exec_n == n, "reached": reached,
            "predicted_s": predicted, "measured_s": measured, "error": err,
            "within_goal": err is not None and abs(err) <= GOAL,
            "predicted_iteration_s": t.steady_s, "measured_iteration_s": meas_it,
            "iteration_term_s": it_term, "rest_term_s": rest, "dominant_term": dominant,
            "predicted_fill_drain_s": t.overhead_s, "setup_s": summary.get("setup_s"),
            "load_before": before, "load_after": after,
        })
    return records


def reach(record: dict[str, Any], measured_s: float) -> str:
    """The measured column: no time to target for a run that did not reach it."""
    return f"{measured_s:.2f}" if record.get("reached", True) else "not reached"


def markdown(records: Sequence[dict[str, Any]]) -> str:
    """The check as a markdown table (stored next to check.json)."""
    lines = ["| candidate | iterations | executor reaches at | predicted s | measured s | error | "
             "iteration predicted / measured ms | dominant term | load before / after |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for c in records:
        if not c.get("reached", True):
            err = f"did not reach the target in {c['iterations']}"
        else:
            err = "-" if c["error"] is None else f"{100 * c['error']:+.1f} %"
        lb = "/".join(f"{x:.2f}" for x in c["load_before"][:1] + c["load_after"][:1])
        lines.append(f"| {c['candidate']} | {c['iterations']} | {c['executor_iterations_to_target'] or '-'} | "
                     f"{c['predicted_s']:.2f} | {reach(c, c['measured_s'])} | {err} | "
                     f"{1e3 * c['predicted_iteration_s']:.1f} / {1e3 * c['measured_iteration_s']:.1f} | "
                     f"{c['dominant_term'] or '-'} | {lb} |")
    return "\n".join(lines) + "\n"
