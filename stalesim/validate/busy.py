"""Was the machine busy while ``validate`` measured? (pure functions)

A validation's time errors describe the cost model only if the ranks had the
cores they were given. Two signs say they did not: other work kept more cores
busy than the run left free (the load average), or the run-to-run noise of the
measured times is larger than the error being reported (so a repeat could have
landed anywhere within it). Either one puts a warning in the report and in the
CLI's summary line, so that nobody reads a loaded run's errors as the model's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The 1-minute load an otherwise idle machine shows (daemons, the shell, the tail of a
# previous command): the benchmarks and the `quiet` wrapper wait for a load below this
# before they measure, so a run is "busy" only when the other work exceeds the free
# cores by more than it.
QUIET_LOAD = 0.6


def cores_used(ranks: int, threads: int, device_kind: str) -> int:
    """Cores a run's ranks occupy: ``threads`` each on CPU ranks, one host thread each on
    CUDA ranks (the rest of the work is on the GPU)."""
    return int(ranks) * (max(1, int(threads)) if device_kind == "cpu" else 1)


def background_load(before: Sequence[float] | None, after: Sequence[float] | None,
                    used: int) -> float | None:
    """The 1-minute load of *other* work during the run, as well as the two readings tell.

    ``before`` (taken before anything started) is other work only. ``after`` also holds
    the run's own processes, at most ``used`` runnable at a time, so ``after - used`` is a
    lower bound on the others at the end. The larger of the two; None when neither is known.
    """
    vals = []
    if before:
        vals.append(float(before[0]))
    if after:
        vals.append(float(after[0]) - used)
    vals = [v for v in vals if math.isfinite(v)]
    return round(max(0.0, max(vals)), 2) if vals else None


def busy_warning(load: float | None, cores: int | None, used: int, noise_floor: float | None,
                 error: float | None) -> str | None:
    """Why this run's errors may be the machine's rather than the model's, or None.

    ``load``: the other work's 1-minute load (:func:`background_load`); ``cores``: the
    machine's (``os.cpu_count()``); ``used``: the run's (:func:`cores_used`);
    ``noise_floor``: the measured run-to-run noise (median over schedules, IQR / median);
    ``error``: the reported |time error| (median over schedules). Unknown inputs
    (None) raise no warning of their own.
    """
    reasons: list[str] = []
    if load is not None and cores is not None and math.isfinite(load):
        free = max(0, int(cores) - int(used))
        if load > free + QUIET_LOAD:
            reasons.append(f"machine busy: other work's 1-minute load {load:.2f} exceeds the {free} "
                           f"core(s) this run left free ({cores} cores, {used} used by its ranks), "
                           "so the measured times include waiting for that work")
    if (noise_floor is not None and error is not None and math.isfinite(noise_floor)
            and math.isfinite(error) and noise_floor > abs(error)):
        reasons.append(f"noise floor {noise_floor:.1%} above the reported |time error| {abs(error):.1%}: "
                       "the error is within the run-to-run noise, not a measure of the model")
    return "; ".join(reasons) if reasons else None
