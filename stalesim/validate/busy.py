"""Was the machine busy while ``validate`` measured?

A validation's time errors describe the cost model only if the ranks had the
cores they were given. Two signs say they did not: other work kept more cores
busy than the run left free, or the run-to-run noise of the measured times is
larger than the error being reported (so a repeat could have landed anywhere
within it). Either one puts a warning in the report and in the CLI's summary
line, so that nobody reads a loaded run's errors as the model's.

Other work is measured, not guessed: the machine's busy CPU time over the run
(``/proc/stat``) minus this process's and its descendants' (``os.times`` for the
children it waited for; ``/proc/<pid>/stat`` for those still running, with the
children they waited for: the fork server that starts the stage timings and the
co-runners lives until the command ends), per second of the run (:func:`cpu_sample`,
:func:`other_work_cores`). The 1-minute
load average is only the fallback where ``/proc/stat`` is missing: it also counts
the command's own earlier work (``stalesim demo`` profiles and calibrates just
before it validates) and decays over minutes, so on a quiet machine it warned
about work that was the command's own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

# The 1-minute load an otherwise idle machine shows (daemons, the shell, the tail of a
# previous command): the benchmarks and the `quiet` wrapper wait for a load below this
# before they measure, so a run is "busy" only when the other work exceeds the free
# cores by more than it.
QUIET_LOAD = 0.6


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds spent so far: by every core of the machine (busy, not idle or iowait)
    and by this process with all its descendants; and the wall clock."""

    wall_s: float
    machine_busy_s: float
    own_s: float


def cpu_sample(stat_path: str = "/proc/stat") -> CpuSample | None:
    """Now, or None where the kernel does not expose ``/proc/stat`` (not Linux)."""
    try:
        with open(stat_path, encoding="ascii") as f:
            fields = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    ticks = [int(x) for x in fields[1:9]] + [0] * max(0, 9 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]  # guest is inside user
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system + _live_descendants_ticks(os.getpid()) / hz
    return CpuSample(wall_s=t.elapsed, machine_busy_s=(user + nice + system + irq + softirq + steal) / hz,
                     own_s=own)


def _live_descendants_ticks(root: int, proc: str = "/proc") -> int:
    """Clock ticks of ``root``'s running descendants: each one's own time and that of the
    children it waited for (``utime + stime + cutime + cstime`` of ``/proc/<pid>/stat``).
    Every finished descendant's time is then counted once: by the process that waited for it."""
    kids: dict[int, list[tuple[int, int]]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", encoding="ascii", errors="replace") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended since the listing
        if len(rest) < 15:
            continue
        # after the name: state, ppid (1), ..., utime (11), stime (12), cutime (13), cstime (14)
        kids.setdefault(int(rest[1]), []).append((int(name), sum(int(x) for x in rest[11:15])))
    total, todo = 0, [root]
    while todo:
        for pid, ticks in kids.get(todo.pop(), []):
            total += ticks
            todo.append(pid)
    return total


def other_work_cores(before: CpuSample | None, after: CpuSample | None) -> float | None:
    """Cores other work kept busy on average between the two samples (never negative);
    None when either is unknown or no time passed. A child still running at ``after`` is
    counted as other work (its time reaches ``os.times`` only once it was waited for)."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    other = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return round(max(0.0, other / (after.wall_s - before.wall_s)), 2)


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
                 error: float | None, *, measure: str = "1-minute load") -> str | None:
    """Why this run's errors may be the machine's rather than the model's, or None.

    ``load``: the other work's busy cores (:func:`other_work_cores`, ``measure`` names it)
    or, without ``/proc/stat``, its 1-minute load (:func:`background_load`); ``cores``: the
    machine's (``os.cpu_count()``); ``used``: the run's (:func:`cores_used`);
    ``noise_floor``: the measured run-to-run noise (median over schedules, IQR / median);
    ``error``: the reported |time error| (median over schedules). Unknown inputs
    (None) raise no warning of their own.
    """
    reasons: list[str] = []
    if load is not None and cores is not None and math.isfinite(load):
        free = max(0, int(cores) - int(used))
        if load > free + QUIET_LOAD:
            reasons.append(f"machine busy: other work's {measure} {load:.2f} exceeds the {free} "
                           f"core(s) this run left free ({cores} cores, {used} used by its ranks), "
                           "so the measured times include waiting for that work")
    if (noise_floor is not None and error is not None and math.isfinite(noise_floor)
            and math.isfinite(error) and noise_floor > abs(error)):
        reasons.append(f"noise floor {noise_floor:.1%} above the reported |time error| {abs(error):.1%}: "
                       "the error is within the run-to-run noise, not a measure of the model")
    return "; ".join(reasons) if reasons else None
