"""Sweep: simulate a grid of configurations in parallel processes and rank them.

The grid is schedules x stages (or explicit PPV candidates) x micro-batches x
workers x devices x links. ``workers`` is the data-parallel degree P for every
schedule: the workers of a data-parallel schedule, the replicas of a pipeline
schedule (simulated by :mod:`stalesim.sim.scale`, on the cluster ``cluster``
describes: node, node size, inter-node link, placement, buckets). Each point is one :func:`stalesim.sim.simulate`
call (fast path or event path) in a ``ProcessPoolExecutor``; every worker
process loads the profile once and caches roofline profiles per device and
compiled schedules per shape, so a point costs only its simulation. A point
that is invalid (2bw with too few micro-batches, more stages than layers, ...)
becomes a row with an ``error`` instead of failing the sweep.

Every row says where its costs came from (``cost_source``: measured,
interpolated, roofline, or extrapolated outside the profiled batch sizes; per
batch size in ``action_batch_source``/``batch_source``) and carries the
plausibility warnings of its simulation (``warnings``, joined by `` | ``); the
table marks both and :func:`plot` draws them.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from stalesim.errors import StalesimError
from stalesim.units import fmt_bytes

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.launch import LaunchSpec
    from stalesim.workloads.profile import Profile

COLUMNS = ("rank", "schedule", "stages", "stages_per_device", "microbatches", "workers", "devices",
           "ppv", "device", "link",
           "iteration_time_s", "throughput_samples_per_s", "speedup", "bubble_fraction",
           "max_peak_memory_bytes", "max_staleness", "max_allreduce_exposed_s", "cost_source", "batch_size",
           "batch_source", "action_batch", "action_batch_source", "warnings", "error")


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
    stages per device only for schedules whose V is free (interleaving; no
    duplicate points). Workers (the data-parallel degree) apply to every
    schedule: P workers of a data-parallel one, P replicas of a pipeline."""
    from stalesim.schedule import get_spec

    shapes: list[tuple[int, tuple[int, ...] | None]] = [(s, None) for s in stages]
    shapes += [(len(p) + 1, tuple(p)) for p in ppv_candidates]
    if not shapes:
        raise StalesimError("stages: give --stages or --ppv-candidates")
    if not schedules:
        raise StalesimError("schedules: give at least one schedule name")
    for name, values in (("microbatches", microbatches), ("workers", workers), ("devices", devices),
                         ("links", links)):
        if not values:
            raise StalesimError(f"{name}: give at least one value")
    size = len(schedules) * len(shapes) * len(microbatches) * len(workers) * len(devices) * len(links)
    if size > MAX_POINTS:  # checked before the product is built
        raise StalesimError(f"grid: {size:,} combinations are more than one sweep simulates "
                            f"(at most {MAX_POINTS:,}); give fewer values")
    points: list[SweepPoint] = []
    seen: set[SweepPoint] = set()
    for name in schedules:
        spec = get_spec(name)
        ms = microbatches if spec.uses_micro else (1,)
        vs = stages_per_device if not spec.fixed_stages_per_device else (None,)
        for (S, ppv), M, P, dev, link, V in itertools.product(shapes, ms, workers, devices, links, vs):
            pt = SweepPoint(name, S, M, P, ppv, dev, link, V)
            if pt not in seen:
                seen.add(pt)
                points.append(pt)
    return points


# a sweep simulates each point in ~10 ms (fast path): 10,000 points are minutes of work
MAX_POINTS = 10_000


# ----------------------------------------------------------------- worker side
CLUSTER_KEYS = ("node", "node_size", "inter_link", "inter_algorithm")  # hardware side of ``cluster``
OPTION_KEYS = ("placement", "bucket_bytes", "symmetry")  # SimOptions side of ``cluster``


class _Worker:
    """Simulates points of one sweep. Picklable (the profile travels as its JSON dict), so
    each pool process gets it with its chunk of points; the parsed profile and the
    per-(device, link) hardware are cached on the instance, not in module state."""

    def __init__(self, profile_dict: dict[str, Any], method: str, batch_size: int | None,
                 batches: int | None, rule: str, cluster: dict[str, Any] | None,
                 force_retime: bool = True, predictor: Any = None) -> None:
        self.profile_dict, self.method, self.batch_size, self.batches = profile_dict, method, batch_size, batches
        self.force_retime = force_retime
        # what times a point (simulate's signature): the cost model's predictor with the machine's
        # calibration bound (stalesim.cost.apply.Predictor, handed down by the CLI), or simulate
        self.predictor = predictor
        self.rule, self.cluster = rule, dict(cluster or {})
        self._profile: Any = None
        self._hw: dict[tuple[str | None, str | None], tuple[Any, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_profile"], state["_hw"] = None, {}
        return state

    def profile(self) -> Any:
        if self._profile is None:
            from stalesim.workloads.profile import profile_from_dict

            self._profile = profile_from_dict(self.profile_dict).with_extrapolation(self.rule)
        return self._profile

    def hardware(self, device: str | None, link: str | None) -> tuple[Any, Any]:
        key = (device, link)
        if key not in self._hw:
            from stalesim.sim.cluster import with_cluster

            prof, hw = self._plain_hardware(device, link)
            c = self.cluster
            self._hw[key] = prof, with_cluster(hw, **{k: c[k] for k in CLUSTER_KEYS if c.get(k) is not None})
        return self._hw[key]

    def _plain_hardware(self, device: str | None, link: str | None) -> tuple[Any, Any]:
        from stalesim.sim.model import SimHardware
        from stalesim.workloads.hardware import get_link, hardware_from_catalog
        from stalesim.workloads.retime import retime

        prof = self.profile()
        if device:  # --targets ask for the roofline; a node's device follows the profile's (retime)
            hwc = hardware_from_catalog(device, link or "ideal")
            return retime(prof, hwc.device, force=self.force_retime), SimHardware.from_hardware(hwc)
        if link:
            lnk = get_link(link)
            cpu = "cpu" in prof.device.lower()
            return prof, SimHardware.from_link(prof.device, lnk, overlaps=not cpu,
                                               occupancy=1.0 if cpu else 0.0)
        return prof, SimHardware.ideal(prof.device)

    def __call__(self, pt: SweepPoint) -> dict[str, Any]:
        """Simulate one point; an invalid point becomes a row with an ``error``."""
        from stalesim.schedule import ScheduleConfig, get_spec
        from stalesim.sim.api import SimOptions, simulate

        row: dict[str, Any] = {k: None for k in COLUMNS}
        row.update(asdict(pt))
        row["ppv"] = None if pt.ppv is None else ",".join(map(str, pt.ppv))
        try:
            prof, hw = self.hardware(pt.device, pt.link)
            dp = get_spec(pt.schedule).data_parallel
            cfg = ScheduleConfig(pt.schedule, stages=pt.stages, batches=self.batches,
                                 microbatches=pt.microbatches, workers=pt.workers if dp else 1,
                                 stages_per_device=pt.stages_per_device)
            c = self.cluster
            opts = SimOptions(ppv=pt.ppv, batch_size=self.batch_size, method=self.method,
                              keep_timeline=False, replicas=1 if dp else pt.workers,
                              **{k: c[k] for k in OPTION_KEYS if k in c})
            r = (self.predictor or simulate)(prof, cfg, hw, opts)
        except StalesimError as exc:
            row["error"] = str(exc)
            return row
        full = r.cost_detail.get("batch_size", {})
        act = r.cost_detail.get("action_batch", {})
        row.update(
            ppv=",".join(map(str, r.partition["ppv"])) if r.partition["ppv"] else "",
            devices=r.devices,
            stages_per_device=pt.stages_per_device or get_spec(pt.schedule).stages_per_device,
            cost_source=r.cost_source,
            batch_size=r.batch_size, batch_source=full.get("source", r.cost_source),
            action_batch=act.get("batch_size"), action_batch_source=act.get("source", r.cost_source),
            warnings=" | ".join(r.warnings),
            iteration_time_s=r.iteration_time_s,
            throughput_samples_per_s=r.throughput_samples_per_s,
            speedup=r.speedup, bubble_fraction=r.bubble_fraction,
            max_peak_memory_bytes=max(r.peak_memory_bytes), max_staleness=max(r.staleness),
            max_allreduce_exposed_s=max(r.allreduce_exposed_s, default=0.0),
            error="",
        )
        return row


def sweep(profile: Profile, points: Sequence[SweepPoint], *, jobs: int = 1, method: str = "fast",
          batch_size: int | None = None, batches: int | None = None,
          extrapolate: str | None = None, cluster: dict[str, Any] | None = None,
          launcher: LaunchSpec | None = None, out: Path | None = None,
          force_retime: bool = True, predictor: Any = None) -> list[dict[str, Any]]:
    """Simulate every point (in ``jobs`` processes) and return rows ranked by throughput.

    ``extrapolate``: the profile's rule outside its measured batch sizes
    (default: the profile's own, ``conservative`` unless changed). ``cluster``: optional
    ``node``, ``node_size``, ``inter_link``, ``inter_algorithm`` (hardware) and
    ``placement``, ``bucket_bytes``, ``symmetry`` (options) for every point.
    ``force_retime``: the points' devices were asked for (``--targets``: the roofline
    estimate), not implied by a node (then a profile for that device is used as it is;
    :mod:`stalesim.workloads.retime`). ``predictor``: what times each point, as ``simulate``
    does (None: ``simulate``; the CLI hands down the cost model's, with a calibration bound).
    """
    from stalesim.workloads.scaling import check_rule

    if method not in ("event", "fast"):
        raise StalesimError(f"method: expected event or fast, got {method!r}")
    if jobs < 1:
        raise StalesimError(f"jobs: must be >= 1, got {jobs}")
    unknown = sorted(set(cluster or {}) - set(CLUSTER_KEYS) - set(OPTION_KEYS))
    if unknown:
        raise StalesimError(f"cluster.{unknown[0]}: unknown (known: {', '.join(CLUSTER_KEYS + OPTION_KEYS)})")
    rule = check_rule(extrapolate or getattr(profile, "extrapolation", "conservative"))
    worker = _Worker(profile.to_dict(), method, batch_size, batches, rule, cluster, force_retime, predictor)
    if launcher is not None and out is not None:
        # --launcher with a sweep folder: the points as jobs a launcher places (this machine's
        # processes, Slurm, Ray), the rows kept in ``out`` for a sweep run again (sweep_jobs)
        from stalesim.sim.sweep_jobs import run_sweep_jobs

        rows = run_sweep_jobs(worker, points, jobs=jobs, launcher=launcher, out=out)
    elif jobs == 1 or len(points) < 2:
        rows = [worker(p) for p in points]
    else:
        chunk = max(1, len(points) // (jobs * 8))
        with ProcessPoolExecutor(max_workers=min(jobs, len(points))) as ex:
            rows = list(ex.map(worker, points, chunksize=chunk))
    return rank(rows)


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ok = sorted((r for r in rows if not r["error"]),
                key=lambda r: (-r["throughput_samples_per_s"], r["max_peak_memory_bytes"],
                               r["max_staleness"]))
    bad = [r for r in rows if r["error"]]
    for i, r in enumerate(ok, 1):
        r["rank"] = i
    return ok + bad


def write_csv(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """Atomic CSV write (see :mod:`stalesim.atomic`)."""
    from stalesim.atomic import write_csv_atomic

    return write_csv_atomic(path, rows, header=list(COLUMNS))


def table(rows: Sequence[dict[str, Any]], limit: int | None = 30) -> str:
    """The ranked table as text (errors listed after the ranking)."""
    head = f"{'rank':>4}  {'schedule':<21} {'S':>2} {'V':>2} {'M':>3} {'P':>4} {'devices':>7}  " \
           f"{'ppv':<14} {'device':<14} " \
           f"{'link':<12} {'ms/batch':>10} {'samples/s':>11} {'speedup':>7} {'bubble':>6} " \
           f"{'peak mem':>9} {'stale':>5}  costs"
    lines = [head]
    ok = [r for r in rows if not r["error"]]
    for r in ok[:limit] if limit else ok:
        lines.append(
            f"{r['rank']:>4}  {r['schedule']:<21} {r['stages']:>2} "
            f"{r['stages_per_device'] or 1:>2} {r['microbatches']:>3} "
            f"{r['workers']:>4} {r['devices']:>7}  {(r['ppv'] or '-'):<14} {(r['device'] or 'profile'):<14} "
            f"{(r['link'] or 'ideal'):<12} {r['iteration_time_s'] * 1e3:>10.4g} "
            f"{r['throughput_samples_per_s']:>11.4g} {r['speedup']:>7.3f}{mark(r):<2} "
            f"{r['bubble_fraction']:>6.3f} {fmt_bytes(r['max_peak_memory_bytes']):>9} "
            f"{r['max_staleness']:>5}  {r.get('cost_source') or '-'}")
    if limit and len(ok) > limit:
        lines.append(f"... {len(ok) - limit} more (see --csv)")
    marked = [r for r in ok if mark(r)]
    if marked:
        lines.append("marks: * costs extrapolated outside the profiled batch sizes (which batch: "
                     "batch_source / action_batch_source in the CSV), ! plausibility warning (below)")
    for r in ok:
        for w in (r.get("warnings") or "").split(" | "):
            if w:
                lines.append(f"WARNING rank {r['rank']} {r['schedule']} S={r['stages']} "
                             f"M={r['microbatches']} P={r['workers']}: {w}")
    bad = [r for r in rows if r["error"]]
    for r in bad:
        lines.append(f"skipped {r['schedule']} S={r['stages']} M={r['microbatches']} "
                     f"P={r['workers']} device={r['device'] or 'profile'} link={r['link'] or 'ideal'}: "
                     f"{r['error']}")
    return "\n".join(lines)


def mark(row: dict[str, Any]) -> str:
    """``*`` when the row's costs are extrapolated, ``!`` when it has warnings."""
    return ("*" if row.get("cost_source") == "extrapolated" else "") + ("!" if row.get("warnings") else "")


# marker per cost source (as in the demo figure): filled measured, half interpolated,
# hollow extrapolated, square roofline
_Fill = Literal["full", "left", "right", "bottom", "top", "none"]  # matplotlib's fill styles
_MARKERS: dict[str, tuple[str, _Fill]] = {
    "measured": ("o", "full"), "interpolated": ("o", "left"), "roofline": ("s", "full"),
    "extrapolated": ("o", "none"), "given": ("D", "full")}


def plot(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Speed-up vs devices for every successful row, one colour per schedule.

    The marker says where the point's costs came from (filled measured, half
    interpolated, hollow extrapolated outside the profiled batch sizes, square
    roofline); a red ring marks a point with a plausibility warning; the dotted
    line is the ideal speed-up (= devices).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ok = [r for r in rows if not r["error"] and r.get("speedup")]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors: dict[str, Any] = {}
    used: set[str] = set()
    for r in ok:
        name = r["schedule"]
        if name not in colors:
            colors[name] = f"C{len(colors) % 10}"
        mk, fill = _MARKERS.get(r.get("cost_source") or "given", ("o", "full"))
        used.add(r.get("cost_source") or "given")
        ax.plot([r["devices"]], [r["speedup"]], marker=mk, fillstyle=fill, color=colors[name],
                markerfacecoloralt="white", ls="none", ms=6, alpha=0.85)
        if r.get("warnings"):
            ax.plot([r["devices"]], [r["speedup"]], marker="o", ms=12, fillstyle="none", color="red",
                    ls="none")
    ns = sorted({r["devices"] for r in ok}) or [1]
    ax.plot([min(ns), max(ns)], [min(ns), max(ns)], ls=":", color="grey", lw=0.8)
    handles = [Line2D([], [], color=c, marker="o", ls="none") for c in colors.values()]
    labels = list(colors)
    handles.append(Line2D([], [], ls=":", color="grey"))
    labels.append("ideal (= devices)")
    for src in ("measured", "interpolated", "extrapolated", "roofline", "given"):
        if src in used:
            mk, fill = _MARKERS[src]
            handles.append(Line2D([], [], marker=mk, fillstyle=fill, color="black", ls="none",
                                  markerfacecoloralt="white"))
            labels.append(f"costs {src}")
    if any(r.get("warnings") for r in ok):
        handles.append(Line2D([], [], marker="o", ms=10, fillstyle="none", color="red", ls="none"))
        labels.append("plausibility warning")
    ax.legend(handles, labels, fontsize=7)
    ax.set_xlabel("devices")
    ax.set_ylabel("predicted speed-up over 1 device")
    ax.set_xticks(ns)
    ax.set_title("sweep: speed-up per configuration", fontsize=9)
    from stalesim.atomic import write_bytes_atomic

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        plt.close(fig)
        raise StalesimError(f"plot: expected a .png, .svg or .pdf path, got {str(path)!r}")
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower().lstrip("."), dpi=110, bbox_inches="tight")
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path
