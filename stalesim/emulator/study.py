"""Studies: a grid of emulations (schedule x placement x mitigation x seed) in parallel.

Each grid point is one :func:`~stalesim.emulator.replay.emulate` run in its own
process (``jobs`` at a time, ``threads`` torch threads each) with its own run
folder; the table aggregates over seeds (mean and sample std) and is written as
CSV and markdown, with a plot of test accuracy against staleness depth.

**Batched** (``batched=True``, ``stalesim study --batched``): the grid points that can
train as one batch (same model, data, schedule, partition, length, optimizer kind:
:func:`stalesim.runtime.batched.check_batch`; they differ in seeds and mitigations)
are grouped, at most ``batch_runs`` per batch, and each batch is one
:class:`~stalesim.emulator.batched.BatchedEmulator` (one process per batch, ``jobs``
at a time). Every batch is checked (shape, memory) before any starts. The run folders
are the same as without batching; ``batches/<id>/`` holds each batch's checkpoint.

**Where jobs run**: this module decides what runs (the grid less the finished runs,
batched or not) as a list of :class:`stalesim.launch.Job`; a launcher only places them
(``launcher``: this machine's process pool, the default, Slurm through submitit, or Ray:
:mod:`stalesim.launch`). A job that fails is reported with its run id and log
(``logs/<id>.log``) once the others are done and kept.

**Resume** (``resume=True``): runs whose ``summary.json`` exists (made with the same
configuration) are taken as they are; a run or batch with a checkpoint continues from
it (``checkpoint_every`` steps, and every epoch end).

**One writer, no orphans**: a study holds its folder's lock (:mod:`stalesim.outlock`)
for its whole life and each worker the run and batch folders it trains, so a second
study into the same ``--out`` is refused at once instead of both losing runs; and
every worker dies with the study (:func:`stalesim.lifetime.die_with_parent`), so a
study killed with ``SIGKILL`` leaves nothing writing into folders its ``--resume``
is about to use. Before anything is built, what runs at once (``jobs`` processes,
each one run or one batch) passes the memory preflight
(:mod:`stalesim.runtime.preflight`).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from stalesim.atomic import AppendLog, savefig_atomic, write_csv_atomic, write_text_atomic
from stalesim.errors import StalesimError
from stalesim.launch import Job, LaunchSpec, make_launcher
from stalesim.outlock import folder_lock
from stalesim.runtime.config import TrainConfig
from stalesim.summary import get as summary_get

#: mitigation name -> the TrainConfig fields it sets
MITIGATIONS: dict[str, dict[str, Any]] = {
    "none": {},
    "weight-prediction": {"weight_prediction": True},
    "spike-compensation": {"spike_compensation": True},
    "pipemare": {"pipemare_lr": True, "pipemare_correction": True},
    "pipemare-lr": {"pipemare_lr": True},
    "pipemare-correction": {"pipemare_correction": True},
    "staleness-lr": {"staleness_lr": True},
    "nesterov-lookahead": {"nesterov_lookahead": True},
    # the Adam look-ahead with mu = beta1 instead of NAdam's schedule (the paper's code)
    "nesterov-lookahead-constant": {"nesterov_lookahead": True, "lookahead_momentum": "constant"},
    "error-feedback": {"error_feedback": True},
    "basis-rotation": {"basis_rotation": True},
}


# each run is an emulation of seconds to hours: more than this is a typo, not a study
MAX_RUNS = 1000

# failed jobs named in the study's one-line error (the rest are counted; their logs are in logs/)
_NAMED_FAILURES = 5


def parse_placements(text: str) -> list[list[int] | int]:
    """'2;1,2;1,2,3,4' -> PPVs; 'S2' -> 2 stages (default PPV); 'none' or '-' -> 1 stage."""
    out: list[list[int] | int] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        if part.lower() in ("none", "-", "s1"):
            out.append([])
        elif part[0] in "sS":
            try:
                out.append(int(part[1:]))
            except ValueError:
                raise StalesimError(f"placements: cannot read {part!r} (e.g. '2;1,2;S4;none')") from None
        else:
            try:
                out.append([int(k) for k in part.split(",")])
            except ValueError:
                raise StalesimError(f"placements: cannot read {part!r} (e.g. '2;1,2;S4;none')") from None
    if not out:
        raise StalesimError("placements: empty")
    return out


def expand(base: TrainConfig, schedules: list[str], placements: list[list[int] | int],
           mitigations: list[str], seeds: list[int]) -> list[tuple[str, TrainConfig]]:
    """Grid points as (run id, config); placement-free schedules run once per seed."""
    from stalesim.schedule import get_spec

    for name in schedules:
        get_spec(name)  # an unknown schedule is named before the size is counted
    # a placement-free schedule (the baseline) runs once per seed, whatever the placements
    size = sum(1 if get_spec(n).placement_free else len(placements) * len(mitigations)
               for n in schedules) * len(seeds)
    if size > MAX_RUNS:  # checked before any config is built
        raise StalesimError(f"study: {size:,} runs (schedules x placements x mitigations x seeds) are "
                            f"more than one study runs (at most {MAX_RUNS:,}); give fewer values")
    if not size:
        raise StalesimError("study: the grid is empty (give schedules, placements, mitigations and seeds)")
    points = []
    for name in schedules:
        # a schedule whose result does not depend on the partition (no staleness, one
        # loss: same math as one device) runs once per seed, as the baseline
        placement_free = get_spec(name).placement_free
        places = [[]] if placement_free else placements
        for mit in mitigations:
            if mit not in MITIGATIONS:
                raise StalesimError(f"mitigations: unknown {mit!r} (known: {', '.join(MITIGATIONS)})")
        # a placement-free schedule is the baseline: it always runs, unmitigated
        mits = ["none"] if placement_free else mitigations
        # -M applies to the grid's micro-batch schedules; the others take whole batches
        micro: dict[str, Any] = {} if get_spec(name).uses_micro else {"microbatches": 1}
        for place in places:
            for mit in mits:
                for seed in seeds:
                    if isinstance(place, int):
                        kw: dict[str, Any] = {"ppv": None, "stages": place}
                        ptxt = f"S{place}"
                    else:
                        kw = {"ppv": list(place) if place else None, "stages": None if place else 1}
                        ptxt = "ppv" + "-".join(map(str, place)) if place else "S1"
                    cfg = replace(base, schedule=name, seed=seed, **kw, **micro, **MITIGATIONS[mit])
                    cfg.check()
                    points.append((f"{name}_{ptxt}_{mit}_seed{seed}", cfg))
    return points


def _run_one(run_id: str, cfg_dict: dict, out: str, threads: int, checkpoint_every: int = 0,
             resume: bool = False) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    from stalesim.emulator.replay import CKPT_NAME, emulate

    cfg = TrainConfig.from_dict(cfg_dict)
    with folder_lock(out):  # the run folder too: an `emulate --out` of it meanwhile is refused
        resume = resume and (Path(out) / CKPT_NAME).is_file()
        summary = emulate(cfg, out=out, progress=False, checkpoint_every=checkpoint_every, resume=resume)
    summary["run_id"] = run_id
    summary["config"] = cfg_dict
    return summary


def _run_batch(batch_dir: str, run_ids: list[str], cfg_dicts: list[dict], run_dirs: list[str], threads: int,
               checkpoint_every: int = 0, resume: bool = False) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    from stalesim.emulator.batched import BatchedEmulator
    from stalesim.emulator.replay import CKPT_NAME

    cfgs = [TrainConfig.from_dict(d) for d in cfg_dicts]
    with contextlib.ExitStack() as held:  # the batch's folder and its runs' folders, while it trains
        for d in (batch_dir, *run_dirs):
            held.enter_context(folder_lock(d))
        resume = resume and (Path(batch_dir) / CKPT_NAME).is_file() and _same_runs(Path(batch_dir), run_dirs)
        emu = BatchedEmulator(cfgs, out=batch_dir, run_dirs=run_dirs, checkpoint_every=checkpoint_every,
                              progress=False)
        summaries = emu.run(resume=resume)
    for rid, sm, cfg_dict in zip(run_ids, summaries, cfg_dicts):
        sm["run_id"] = rid
        sm["config"] = cfg_dict
    return summaries


def _same_runs(batch_dir: Path, run_dirs: list[str]) -> bool:
    """Whether the checkpoint in ``batch_dir`` was made by these runs. Batch folders are named by
    grid position, so a study re-run with more seeds gives a new set of runs the folder of a
    finished batch: that checkpoint is another batch's, and the new one starts from step 0."""
    try:
        made_by = json.loads((batch_dir / "batch.json").read_text(encoding="utf-8"))["run_dirs"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    # by run id (the folder's name): the same study resumed from another directory still matches
    return [Path(d).name for d in made_by] == [Path(d).name for d in run_dirs]


def finished_runs(out: Path, points: dict[str, dict]) -> list[dict]:
    """Summaries already in ``out/results.jsonl`` for these points (a resumed study skips them).

    ``points`` maps run id -> config dict. A line is kept only when its run id is in the grid
    and the config it ran with (``config``) equals the grid's, so a study re-run with other
    settings into the same folder runs everything again instead of mixing old results in. A
    line that does not parse (each line is one ``write``, but a hand-edited file can) is dropped.
    """
    path = out / "results.jsonl"
    if not path.exists():
        return []
    done: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("run_id") in points \
                and rec.get("config") == points[rec["run_id"]]:
            done[rec["run_id"]] = rec
    return list(done.values())


def group_batches(points: list[tuple[str, TrainConfig]], batch_runs: int | None = None
                  ) -> list[tuple[str, list[tuple[str, TrainConfig]]]]:
    """The grid's batches, in grid order: points that may train together (every field but
    :data:`~stalesim.runtime.batched.PER_RUN_FIELDS` equal, the same partition), at most
    ``batch_runs`` per batch; ids ``b<NN>_<schedule>_S<stages>``."""
    from stalesim.runtime.batched import PER_RUN_FIELDS

    groups: dict[str, list[tuple[str, TrainConfig]]] = {}
    for rid, cfg in points:
        d = cfg.to_dict()
        key = json.dumps({k: v for k, v in d.items() if k not in PER_RUN_FIELDS and k not in ("stages", "ppv")}
                         | {"S": cfg.num_stages, "ppv": d["ppv"]}, sort_keys=True)
        groups.setdefault(key, []).append((rid, cfg))
    out: list[tuple[str, list[tuple[str, TrainConfig]]]] = []
    for members in groups.values():
        size = batch_runs or len(members)
        for a in range(0, len(members), size):
            chunk = members[a:a + size]
            c = chunk[0][1]
            out.append((f"b{len(out):02d}_{c.schedule}_S{c.num_stages}", chunk))
    return out


def _check_memory(todo: list[tuple[str, TrainConfig]],
                  batches: list[tuple[str, list[tuple[str, TrainConfig]]]], jobs: int) -> None:
    """The memory preflight of what runs at once: ``jobs`` processes, each one run or one batch
    (before any model is built; the batched emulator's finer check follows)."""
    from stalesim.runtime.preflight import estimate_run, preflight

    if not todo:
        return
    per_process = max((len(members) for _, members in batches), default=1)
    processes = min(jobs, len(batches) if batches else len(todo))
    worst = max((cfg for _, cfg in todo), key=lambda c: estimate_run(c).total)
    preflight(worst, what=f"study: {processes} process(es) of {per_process} run(s) of {worst.model} "
                          f"at batch size {worst.batch_size}",
              processes=processes, runs_per_process=per_process)


def run_study(points: list[tuple[str, TrainConfig]], out: Path, jobs: int = 2,
              progress: bool | None = None, mitigation_of: dict[str, str] | None = None, *,
              resume: bool = True, batched: bool = False, batch_runs: int | None = None,
              continue_runs: bool = False, checkpoint_every: int = 0, threads: int = 1,
              launcher: LaunchSpec | None = None, tensorboard: Path | None = None) -> list[dict]:
    """Run every point (``jobs`` processes, or ``jobs`` batches at a time when ``batched``),
    return the summaries (also results.jsonl); see the module doc for batching.

    ``launcher`` places the jobs (:mod:`stalesim.launch`: this machine's processes by
    default, Slurm through submitit, Ray); what runs is decided here, the same for all.
    A job that fails is reported (run id, log) after the others finished and were kept:
    one :class:`StalesimError` naming every failed job. ``tensorboard``: each run's
    scalars are written there as it is kept (:mod:`stalesim.launch.tb_scalars`).

    With ``resume`` (the default) the runs whose summary is already in ``results.jsonl``
    with the same config are kept and not run again, so an interrupted study continues
    where it stopped; ``continue_runs`` also continues each unfinished run (or batch) from
    its last checkpoint (written every ``checkpoint_every`` steps) instead of restarting it.
    """
    with folder_lock(out):  # one study per folder: a second one is refused, naming this one
        return _run_study(points, out, jobs, progress, mitigation_of, resume=resume, batched=batched,
                          batch_runs=batch_runs, continue_runs=continue_runs,
                          checkpoint_every=checkpoint_every, threads=threads,
                          launcher=launcher or LaunchSpec(), tensorboard=tensorboard)


def _jobs(out: Path, todo: list[tuple[str, TrainConfig]],
          batches: list[tuple[str, list[tuple[str, TrainConfig]]]], *, batched: bool, threads: int,
          checkpoint_every: int, continue_runs: bool) -> list[Job]:
    """What runs, as launcher jobs (one per run, or per batch): the one place that decides it.
    A job started again after its process was lost (a preempted Slurm task, a dead Ray
    worker) continues from its checkpoint (``requeue_args``)."""
    logs = out / "logs"
    if batched:
        return [Job(bid, _run_batch, args, logs / f"{bid}.log", requeue_args=(*args[:-1], True))
                for bid, members in batches
                for args in [(str(out / "batches" / bid), [rid for rid, _ in members],
                              [cfg.to_dict() for _, cfg in members],
                              [str(out / "runs" / rid) for rid, _ in members], threads,
                              checkpoint_every, continue_runs)]]
    return [Job(rid, _run_one, args, logs / f"{rid}.log", requeue_args=(*args[:-1], True))
            for rid, cfg in todo
            for args in [(rid, cfg.to_dict(), str(out / "runs" / rid), threads, checkpoint_every, continue_runs)]]


def _run_study(points: list[tuple[str, TrainConfig]], out: Path, jobs: int, progress: bool | None,
               mitigation_of: dict[str, str] | None, *, resume: bool, batched: bool,
               batch_runs: int | None, continue_runs: bool, checkpoint_every: int,
               threads: int, launcher: LaunchSpec, tensorboard: Path | None) -> list[dict]:
    results: list[dict] = []
    done: dict[str, dict] = {}
    if resume:
        cfgs = {rid: json.loads(json.dumps(cfg.to_dict())) for rid, cfg in points}
        done = {r["run_id"]: r for r in finished_runs(out, cfgs)}
    todo = [(rid, cfg) for rid, cfg in points if rid not in done]
    batches = group_batches(todo, batch_runs) if batched else []
    if launcher.on_this_machine:  # a cluster's tasks have their nodes' memory, not this machine's
        _check_memory(todo, batches, jobs)
    if batched:
        from stalesim.emulator.batched import BatchedEmulator

        for _, members in batches:  # every batch fits before any starts
            BatchedEmulator.preflight([cfg for _, cfg in members])
    bar = None
    if progress is not False:
        from stalesim.progress import Progress

        bar = Progress(len(points), "study", "run", initial=len(done), enabled=progress)
    t0 = time.perf_counter()
    place = make_launcher(launcher, jobs=jobs, threads=threads, folder=out / "logs")
    if tensorboard is not None:
        from stalesim.launch.tb_scalars import check_available, write_run

        check_available()

    def keep(res: dict, log: AppendLog | None) -> None:
        res["mitigation"] = (mitigation_of or {}).get(res["run_id"], "none")
        results.append(res)
        if log is not None:
            log.write_line(json.dumps(res))
        if tensorboard is not None:
            write_run(tensorboard, res, res["mitigation"])
        if bar is not None and log is not None:
            bar.update(1)

    with AppendLog(out / "results.jsonl", (json.dumps(r) for r in done.values())) as log:
        for r in done.values():
            keep(r, None)
        for _, res in place.run(_jobs(out, todo, batches, batched=batched, threads=threads,
                                      checkpoint_every=checkpoint_every, continue_runs=continue_runs)):
            for one in (res if batched else [res]):
                keep(one, log)
    if bar is not None:
        bar.close()
    order = {rid: i for i, (rid, _) in enumerate(points)}
    results.sort(key=lambda r: order[r["run_id"]])
    write_text_atomic(out / "study_wall_time_s.txt", f"{time.perf_counter() - t0:.1f}\n")
    if place.failures:
        failed = place.failures
        more = f"; and {len(failed) - _NAMED_FAILURES} more (logs/)" if len(failed) > _NAMED_FAILURES else ""
        raise StalesimError(f"study: {len(failed)} job(s) failed, the other runs are kept in "
                            f"{out / 'results.jsonl'} (run the same study again to run only these): "
                            + "; ".join(f.describe() for f in failed[:_NAMED_FAILURES]) + more)
    return results


def _mean_std(xs: list[float]) -> tuple[float | None, float | None]:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def aggregate(results: list[dict]) -> list[dict[str, Any]]:
    """One row per (schedule, placement, mitigation): mean ± std over seeds."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        key = (r["schedule"], json.dumps(r["ppv"]), r.get("mitigation", "none"))
        groups.setdefault(key, []).append(r)
    rows = []
    for (sched, ppv, mit), rs in groups.items():
        acc_m, acc_s = _mean_std([summary_get(r, "final_test_accuracy") for r in rs])
        loss_m, loss_s = _mean_std([r["final_loss"] for r in rs])
        val_m, val_s = _mean_std([summary_get(r, "final_val_loss") for r in rs])
        staleness = summary_get(rs[0], "staleness_ir")  # the IR's (a study row's one column)
        rows.append({
            "schedule": sched, "ppv": json.loads(ppv), "stages": rs[0]["stages"], "mitigation": mit,
            "staleness": staleness, "depth": max(staleness),
            "seeds": len(rs), "diverged": sum(bool(r["diverged"]) for r in rs),
            "test_acc_mean": acc_m, "test_acc_std": acc_s, "final_loss_mean": loss_m,
            "final_loss_std": loss_s, "val_loss_mean": val_m, "val_loss_std": val_s,
            "wall_time_s_mean": statistics.fmean(r["wall_time_s"] for r in rs),
        })
    return rows


def write_table(rows: list[dict], out: Path) -> None:
    cols = ["schedule", "ppv", "stages", "mitigation", "staleness", "depth", "seeds", "diverged",
            "test_acc_mean", "test_acc_std", "final_loss_mean", "final_loss_std", "val_loss_mean",
            "val_loss_std", "wall_time_s_mean"]
    write_csv_atomic(out / "table.csv",
                     [{k: json.dumps(r[k]) if isinstance(r[k], list) else r[k] for k in cols} for r in rows],
                     header=cols)
    lm = any(r.get("val_loss_mean") is not None for r in rows)
    metric = "validation loss (nats/char)" if lm else "test accuracy (%)"
    lines = [f"| schedule | PPV | S | mitigation | staleness | seeds | {metric} | final loss | diverged |",
             "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if lm:
            acc = "n/a" if r["val_loss_mean"] is None else f"{r['val_loss_mean']:.4f} ± {r['val_loss_std']:.4f}"
        else:
            acc = ("n/a" if r["test_acc_mean"] is None
                   else f"{100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f}")
        loss = "n/a" if r["final_loss_mean"] is None else f"{r['final_loss_mean']:.4f} ± {r['final_loss_std']:.4f}"
        ppv = "-" if not r["ppv"] else "(" + ", ".join(map(str, r["ppv"])) + ")"
        lines.append(f"| {r['schedule']} | {ppv} | {r['stages']} | {r['mitigation']} | "
                     f"{r['staleness']} | {r['seeds']} | {acc} | {loss} | {r['diverged']} |")
    write_text_atomic(out / "table.md", "\n".join(lines) + "\n")


def plot(rows: list[dict], out: Path) -> Path:
    """Test accuracy (classifiers) or validation loss (language models) against staleness depth,
    one line per (schedule, mitigation) in the schedule's colour; a point with a diverged seed
    (NaN or inf loss, the study's own ``diverged`` count) gets a red cross and its count, one
    whose every seed diverged a cross at the bottom of the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from stalesim.schedule.style import DEPTH_AXIS_LABEL, schedule_style

    lm = any(r.get("val_loss_mean") is not None for r in rows)
    key, scale = ("val_loss", 1.0) if lm else ("test_acc", 100.0)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        series.setdefault((r["schedule"], r["mitigation"]), []).append(r)
    for (sched, mit), rs in sorted(series.items()):
        rs.sort(key=lambda r: r["depth"])
        ok = [r for r in rs if r.get(f"{key}_mean") is not None]
        st = schedule_style(sched)
        if ok:
            ax.errorbar([r["depth"] for r in ok], [scale * r[f"{key}_mean"] for r in ok],
                        yerr=[scale * (r.get(f"{key}_std") or 0.0) for r in ok], marker=st.marker,
                        color=st.color, linestyle="-" if mit == "none" else "--", capsize=3,
                        label=sched if mit == "none" else f"{sched} + {mit}")
        _mark_diverged(ax, rs, key, scale)
    ax.set_xlabel(DEPTH_AXIS_LABEL)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a depth is a whole number of updates
    ax.set_ylabel("validation loss (nats/char)" if lm else "test accuracy (%)")
    what = "validation loss" if lm else "test accuracy"
    ax.set_title(f"{what} against staleness depth (mean ± std over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        return savefig_atomic(fig, out / ("val_loss_vs_staleness.png" if lm else "accuracy_vs_staleness.png"),
                              dpi=120)
    finally:
        plt.close(fig)


DIVERGED_LABEL = "diverged seed(s) (NaN/inf loss; count beside)"


def _mark_diverged(ax: Any, rs: list[dict], key: str, scale: float) -> None:
    """A red cross on each point with diverged seeds (at its mean over the others, or at the
    bottom of the axes when none is left), labelled ``k/n``; one legend entry in all."""
    from matplotlib.transforms import blended_transform_factory

    bottom = blended_transform_factory(ax.transData, ax.transAxes)
    for r in rs:
        if not r.get("diverged"):
            continue
        mean = r.get(f"{key}_mean")
        y, tr = (scale * mean, ax.transData) if mean is not None else (0.03, bottom)
        labelled = DIVERGED_LABEL in ax.get_legend_handles_labels()[1]
        ax.plot([r["depth"]], [y], "x", color="red", ms=9, mew=2, transform=tr, zorder=5,
                label="_" if labelled else DIVERGED_LABEL)
        ax.annotate(f"{r['diverged']}/{r['seeds']}", (r["depth"], y), xycoords=tr, xytext=(6, -3),
                    textcoords="offset points", fontsize=7, color="red")
