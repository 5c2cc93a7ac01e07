"""A plan's outputs: the terminal table, ``plan.json``, ``plan.csv`` (one row per
candidate, flat columns: ``pandas.read_csv`` reads it as is) and ``pareto.png`` (time to
target against peak memory per device). Every file is written atomically. Each
asynchronous row carries its iso-loss overhead (:mod:`~stalesim.plan.isoloss`) in all four."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stalesim.atomic import savefig_atomic, write_csv_atomic, write_json_atomic
from stalesim.plan.compose import Row, pareto
from stalesim.plan.isoloss import EMPTY, IsoLoss, iso_loss

CSV_COLUMNS = ("rank", "label", "schedule", "devices", "stages", "microbatches", "workers", "mitigation",
               "optimizer", "warmup", "switch", "synchronous", "status", "seeds", "iterations_mean",
               "iterations_lo", "iterations_hi", "iteration_s", "first_phase_iteration_s", "fill_drain_s",
               "time_to_target_s", "time_lo_s", "time_hi_s", "peak_memory_bytes", "feasible", "reason",
               "speedup_vs_sync", "speedup_vs_one_device", "iso_loss_overhead", "iso_loss_reference",
               "samples_to_target", "cost_source", "note")


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.3g} s"


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**30:.3g}"


def _iso(header: dict[str, Any], rows: Sequence[Row]) -> dict[str, IsoLoss]:
    return iso_loss(rows, int(header.get("batch_size") or 0))


def _iso_text(iso: IsoLoss | None) -> str:
    return "-" if iso is None else f"{iso.overhead:.2f}x"


def iso_note(isos: dict[str, IsoLoss]) -> str | None:
    """The line naming what the iso-loss column is measured against (one per reference)."""
    refs = sorted({(i.reference, i.reference_kind) for i in isos.values()})
    if not refs:
        return None
    what = "; ".join(f"{label} ({kind})" for label, kind in refs)
    return f"iso-loss = iterations (= samples) to target over the synchronous schedule's: {what}"


def table(rows: Sequence[Row], header: dict[str, Any]) -> str:
    """The terminal table: rank, candidate, iterations (interval), iteration time, time to
    target (interval), iso-loss overhead, memory, speed-ups; unranked rows say why."""
    isos = _iso(header, rows)
    lines = [f"plan: {header['model']} / {header['dataset']}, target {header['target']}, "
             f"{header['devices']} x {header['hardware']}",
             f"memory per device: {header['capacity']}; iteration-time error +-{100 * header['time_error']:.0f} %; "
             f"seeds {header['seeds']}",
             f"{'#':>3} {'candidate':<46} {'iterations [95% / range]':>26} {'iter':>9} "
             f"{'time to target [interval]':>30} {'iso-loss':>8} {'GiB/dev':>8} {'vs sync':>8} {'vs 1 dev':>8}"]
    for r in rows:
        d = r.to_dict()
        if d["iterations_mean"] is None:
            its = r.convergence.status
        else:
            its = f"{d['iterations_mean']:.0f} [{d['iterations_lo']:.0f}, {d['iterations_hi']:.0f}]"
        tt = "-" if r.time_s is None else f"{_dur(r.time_s.mean)} [{_dur(r.time_s.lo)}, {_dur(r.time_s.hi)}]"
        it = "-" if d["iteration_s"] is None else f"{d['iteration_s'] * 1e3:.3g} ms"
        rank = "" if r.rank is None else str(r.rank)
        su = "-" if r.speedup_vs_sync is None else f"{r.speedup_vs_sync:.2f}x"
        s1 = "-" if r.speedup_vs_one_device is None else f"{r.speedup_vs_one_device:.2f}x"
        lines.append(f"{rank:>3} {r.candidate.label[:46]:<46} {its:>26} {it:>9} {tt:>30} "
                     f"{_iso_text(isos.get(r.candidate.label)):>8} "
                     f"{_gib(d['peak_memory_bytes']):>8} {su:>8} {s1:>8}")
        if not r.feasible and r.reason:
            lines.append(f"{'':>3}   INFEASIBLE: {r.reason}")
        elif r.convergence.status != "reached" and r.convergence.note:
            lines.append(f"{'':>3}   {r.convergence.note}")
        if r.timing is not None and r.timing.warnings:
            more = len(r.timing.warnings) - 1
            lines.append(f"{'':>3}   simulator WARNING: {r.timing.warnings[0][:150]}"
                         + (f" (+{more} more in plan.json)" if more else ""))
    best = next((r for r in rows if r.rank == 1), None)
    if best is not None:
        lines.append(f"proposal: {best.candidate.label} (predicted {_dur(best.time_s.mean if best.time_s else None)})")
    lines += [f"policy: {w}" for w in policy_wins(rows)]
    note = iso_note(isos)
    if note:
        lines.append(note)
    return "\n".join(lines)


def policy_wins(rows: Sequence[Row]) -> list[str]:
    """For each schedule (with its mitigation and optimizer) whose fastest ranked row has a
    warm-up or a switch point: that policy against the same schedule without it."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        c = r.candidate
        if r.rank is not None:
            groups.setdefault((c.schedule, c.mitigation, c.optimizer), []).append(r)
    out = []
    for rs in groups.values():
        top = min(rs, key=lambda r: r.rank or 0)
        c = top.candidate
        if not (c.warmup or c.switch is not None) or top.time_s is None:
            continue
        plain = [r for r in rs if not r.candidate.warmup and r.candidate.switch is None and r.time_s]
        what = f"warm-up {c.warmup}" if c.warmup else f"switch at {c.switch}"
        vs = f" vs {_dur(plain[0].time_s.mean)} without" if plain and plain[0].time_s else ""
        out.append(f"{what} wins for {replace(c, warmup=0, switch=None).label}: {_dur(top.time_s.mean)}{vs}")
    return out


def write_outputs(out: Path, rows: Sequence[Row], header: dict[str, Any], *, figure: bool = True) -> list[Path]:
    """plan.json, plan.csv and (``figure``) pareto.png in ``out``; returns the paths."""
    isos = _iso(header, rows)
    dicts = [{**r.to_dict(), **(isos[r.candidate.label].to_dict() if r.candidate.label in isos else EMPTY)}
             for r in rows]
    paths = [write_json_atomic(out / "plan.json", {**header, "rows": dicts,
                                                   "pareto": [r.candidate.label for r in pareto(rows)]}),
             write_csv_atomic(out / "plan.csv", [{k: d.get(k) for k in CSV_COLUMNS} for d in dicts],
                              header=list(CSV_COLUMNS))]
    if figure:
        paths.append(plot_pareto(rows, out / "pareto.png", header))
    return paths


def plot_pareto(rows: Sequence[Row], path: Path, header: dict[str, Any]) -> Path:
    """Time to target (interval as error bar) against peak memory per device; synchronous
    candidates as circles, stale ones as triangles, in their schedule's colour
    (:mod:`stalesim.schedule.style`), the top five labelled with their iso-loss overhead;
    infeasible ones as grey crosses, the Pareto front as a line, the device's capacity as a
    vertical line. The legend (right of the axes) says what every shape and colour means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    isos = _iso(header, rows)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    peaks = [r.timing.peak_bytes for r in rows if r.timing is not None]
    unit, scale = ("GiB", 2**30) if max(peaks, default=0) >= 2**30 else ("MiB", 2**20)
    drawn = [r for r in rows if r.time_s is not None and r.timing is not None]
    xs = [r.timing.peak_bytes / scale for r in drawn if r.timing is not None]
    mid = (min(xs, default=0.0) + max(xs, default=0.0)) / 2
    for r in drawn:
        _pareto_point(ax, r, scale, mid, isos.get(r.candidate.label))
    front = pareto(rows)
    if front:
        ax.plot([r.timing.peak_bytes / scale for r in front if r.timing],
                [r.time_s.mean for r in front if r.time_s], "-", color="k", lw=0.8)
    cap = header.get("capacity_bytes")
    if cap and cap > 2 * max(peaks, default=0):
        cap = None  # far right of every candidate: the line would only squeeze them together
    if cap:
        ax.axvline(cap / scale, color="r", ls="--", lw=0.8)
    ax.set_xlabel(f"peak memory per device ({unit})")
    ax.set_ylabel("predicted time to target (s)")
    note = iso_note(isos)
    ax.set_title(f"{header['model']} on {header['devices']} x {header['hardware']}\nto {header['target']}"
                 + (f"\n{note}" if note else ""), fontsize=7 if note else 8)
    ax.grid(alpha=0.3)
    # right of the axes: inside, it covered candidates (bbox_inches="tight" keeps it in the file)
    fig.legend(handles=pareto_legend(drawn, front=bool(front), capacity=bool(cap)), loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    try:
        return savefig_atomic(fig, path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)


def _pareto_point(ax: Any, r: Row, scale: float, mid: float, iso: IsoLoss | None) -> None:
    """One candidate; its label (top five) grows leftwards right of the middle, so the
    right-most one stays inside the axes (it was cut off at the figure's edge)."""
    from stalesim.schedule.style import schedule_style

    if r.timing is None or r.time_s is None:
        return
    x, y = r.timing.peak_bytes / scale, r.time_s.mean
    if not r.feasible:
        ax.plot([x], [y], "x", color="0.6")
        return
    ax.errorbar([x], [y], yerr=[[y - r.time_s.lo], [r.time_s.hi - y]],
                fmt="o" if r.candidate.synchronous else "^", color=schedule_style(r.candidate.schedule).color,
                capsize=3, ms=5, alpha=0.8)
    if r.rank is not None and r.rank <= 5:
        more = "" if iso is None else f" (iso-loss {iso.overhead:.2f}x)"
        left = x > mid
        ax.annotate(f"{r.rank}. {r.candidate.label}{more}", (x, y), fontsize=6, xytext=(-4 if left else 4, 2),
                    textcoords="offset points", ha="right" if left else "left")


def pareto_legend(rows: Sequence[Row], *, front: bool, capacity: bool) -> list[Any]:
    """Legend handles: each drawn schedule's colour, then the shapes and lines."""
    from matplotlib.lines import Line2D

    from stalesim.schedule.style import schedule_style

    handles: list[Any] = [Line2D([], [], marker="s", ls="none", color=schedule_style(name).color, label=name)
                          for name in dict.fromkeys(r.candidate.schedule for r in rows if r.feasible)]
    shapes = [("o", "synchronous (circle)", any(r.candidate.synchronous and r.feasible for r in rows)),
              ("^", "stale weights (triangle)", any(not r.candidate.synchronous and r.feasible for r in rows))]
    handles += [Line2D([], [], marker=m, ls="none", color="0.3", label=label) for m, label, used in shapes if used]
    if any(not r.feasible for r in rows):
        handles.append(Line2D([], [], marker="x", ls="none", color="0.6", label="infeasible (out of memory)"))
    handles.append(Line2D([], [], marker="|", ms=9, ls="none", color="0.3",
                           label="bar: time-to-target interval"))
    if front:
        handles.append(Line2D([], [], color="k", lw=0.8, label="Pareto front"))
    if capacity:
        handles.append(Line2D([], [], color="r", ls="--", lw=0.8, label="device memory"))
    return handles
