"""Sweep: simulate a grid of configurations in parallel processes and rank them.

The grid is schedules x stages (or explicit PPV candidates) x micro-batches x
workers x devices x links. Each point is one :func:`stalesim.sim.simulate`
call (fast path or event path) in a ``ProcessPoolExecutor``; every worker
process loads the profile once and caches roofline profiles per device and
compiled schedules per shape, so a point costs only its simulation. A point
that is invalid (2bw with too few micro-batches, more stages than layers, ...)
becomes a row with an ``error`` instead of failing the sweep.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError

COLUMNS = ("rank", "schedule", "stages", "stages_per_device", "devices", "microbatches", "workers",
           "ppv", "device", "link",
           "iteration_time_s", "throughput_samples_per_s", "speedup", "bubble_fraction",
           "max_peak_memory_bytes", "max_staleness", "error")


@dataclass(frozen=True)
class SweepPoint:
    schedule: str
    stages: int
    microbatches: int = 1
    workers: int = 1
    ppv: tuple[int, ...] | None = None
    device: str | None = None
    link: str | None = None
    stages_per_device: int | None = None  # V chunks per device (None: the schedule's own)


def grid(schedules: Sequence[str], stages: Sequence[int] = (), *, microbatches: Sequence[int] = (1,),
         workers: Sequence[int] = (1,), ppv_candidates: Sequence[Sequence[int]] = (),
         devices: Sequence[str | None] = (None,), links: Sequence[str | None] = (None,),
         stages_per_device: Sequence[int | None] = (None,)) -> list[SweepPoint]:
    """All combinations; micro-batches only vary for schedules that use them,
    workers only for data-parallel ones, stages per device only for schedules whose
    V is free (interleaving; no duplicate points)."""
    from stalesim.schedule import get_spec

    shapes: list[tuple[int, tuple[int, ...] | None]] = [(s, None) for s in stages]
    shapes += [(len(p) + 1, tuple(p)) for p in ppv_candidates]
    if not shapes:
        raise StalesimError("stages: give --stages or --ppv-candidates")
    points: list[SweepPoint] = []
    seen: set[SweepPoint] = set()
    for name in schedules:
        spec = get_spec(name)
        ms = microbatches if spec.uses_micro else (1,)
        ws = workers if spec.data_parallel else (1,)
        vs = stages_per_device if not spec.fixed_stages_per_device else (None,)
        for (S, ppv), M, P, dev, link, V in itertools.product(shapes, ms, ws, devices, links, vs):
            pt = SweepPoint(name, S, M, P, ppv, dev, link, V)
            if pt not in seen:
                seen.add(pt)
                points.append(pt)
    return points


# ----------------------------------------------------------------- worker side
_STATE: dict[str, Any] = {}


def _init(profile_dict: dict, method: str, batch_size: int | None, batches: int | None) -> None:
    from stalesim.workloads.profile import profile_from_dict

    _STATE.update(profile=profile_from_dict(profile_dict), method=method,
                  batch_size=batch_size, batches=batches)
    _hardware.cache_clear()


@lru_cache(maxsize=64)
def _hardware(device: str | None, link: str | None):
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import get_link, hardware_from_catalog, roofline_profile

    prof = _STATE["profile"]
    if device:
        hwc = hardware_from_catalog(device, link or "ideal")
        return roofline_profile(prof, hwc.device), SimHardware.from_hardware(hwc)
    if link:
        lnk = get_link(link)
        cpu = "cpu" in prof.device.lower()
        return prof, SimHardware.from_link(prof.device, lnk, overlaps=not cpu,
                                           occupancy=1.0 if cpu else 0.0)
    return prof, SimHardware.ideal(prof.device)


def run_point(pt: SweepPoint) -> dict[str, Any]:
    """Simulate one point in this process (after :func:`_init`)."""
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim.api import SimOptions, simulate

    row: dict[str, Any] = {k: None for k in COLUMNS}
    row.update(asdict(pt))
    row["ppv"] = None if pt.ppv is None else ",".join(map(str, pt.ppv))
    try:
        prof, hw = _hardware(pt.device, pt.link)
        cfg = ScheduleConfig(pt.schedule, stages=pt.stages, batches=_STATE["batches"],
                             microbatches=pt.microbatches, workers=pt.workers,
                             stages_per_device=pt.stages_per_device)
        opts = SimOptions(ppv=pt.ppv, batch_size=_STATE["batch_size"], method=_STATE["method"],
                          keep_timeline=False)
        r = simulate(prof, cfg, hw, opts)
    except StalesimError as exc:
        row["error"] = str(exc)
        return row
    row.update(
        ppv=",".join(map(str, r.partition["ppv"])) if r.partition["ppv"] else "",
        devices=r.devices, stages_per_device=r.stages // r.devices if not r.workers > 1 else 1,
        iteration_time_s=r.iteration_time_s,
        throughput_samples_per_s=r.throughput_samples_per_s,
        speedup=r.speedup, bubble_fraction=r.bubble_fraction,
        max_peak_memory_bytes=max(r.peak_memory_bytes), max_staleness=max(r.staleness),
        error="",
    )
    return row


def sweep(profile, points: Sequence[SweepPoint], *, jobs: int = 1, method: str = "fast",
          batch_size: int | None = None, batches: int | None = None) -> list[dict[str, Any]]:
    """Simulate every point (in ``jobs`` processes) and return rows ranked by throughput."""
    if method not in ("event", "fast"):
        raise StalesimError(f"method: expected event or fast, got {method!r}")
    if jobs < 1:
        raise StalesimError(f"jobs: must be >= 1, got {jobs}")
    init = (profile.to_dict(), method, batch_size, batches)
    if jobs == 1 or len(points) < 2:
        _init(*init)
        rows = [run_point(p) for p in points]
    else:
        chunk = max(1, len(points) // (jobs * 8))
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=init) as ex:
            rows = list(ex.map(run_point, points, chunksize=chunk))
    return rank(rows)


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ok = sorted((r for r in rows if not r["error"]),
                key=lambda r: (-r["throughput_samples_per_s"], r["max_peak_memory_bytes"],
                               r["max_staleness"]))
    bad = [r for r in rows if r["error"]]
    for i, r in enumerate(ok, 1):
        r["rank"] = i
    return ok + bad


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def write_csv(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """Atomic CSV write (tmp + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(to_csv(rows))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def table(rows: Sequence[dict[str, Any]], limit: int | None = 30) -> str:
    """The ranked table as text (errors listed after the ranking)."""
    head = f"{'rank':>4}  {'schedule':<21} {'S':>2} {'D':>2} {'M':>3} {'P':>2}  {'ppv':<14} {'device':<14} " \
           f"{'link':<12} {'ms/batch':>10} {'samples/s':>11} {'speedup':>7} {'bubble':>6} " \
           f"{'peak mem':>9} {'stale':>5}"
    lines = [head]
    ok = [r for r in rows if not r["error"]]
    for r in ok[:limit] if limit else ok:
        lines.append(
            f"{r['rank']:>4}  {r['schedule']:<21} {r['stages']:>2} {r['devices']:>2} {r['microbatches']:>3} "
            f"{r['workers']:>2}  {(r['ppv'] or '-'):<14} {(r['device'] or 'profile'):<14} "
            f"{(r['link'] or 'ideal'):<12} {r['iteration_time_s'] * 1e3:>10.4g} "
            f"{r['throughput_samples_per_s']:>11.4g} {r['speedup']:>7.3f} "
            f"{r['bubble_fraction']:>6.3f} {r['max_peak_memory_bytes'] / 1e6:>7.4g}MB "
            f"{r['max_staleness']:>5}")
    if limit and len(ok) > limit:
        lines.append(f"... {len(ok) - limit} more (see --csv)")
    bad = [r for r in rows if r["error"]]
    for r in bad:
        lines.append(f"skipped {r['schedule']} S={r['stages']} M={r['microbatches']} "
                     f"P={r['workers']} device={r['device'] or 'profile'} link={r['link'] or 'ideal'}: "
                     f"{r['error']}")
    return "\n".join(lines)
