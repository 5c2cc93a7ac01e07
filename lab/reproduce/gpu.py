"""``make reproduce-gpu``: the stale-weights paper's CIFAR-10 experiments, end to end.

What it runs (:func:`plan`):

* **one GPU, emulator** (exact staleness, one process): AlexNet at the paper's 4-stage PPV (3),
  VGG-16 at PPV (2), ResNet-20 at PPV (7), and the deeper pipelines of the paper (its 6- and
  8-stage, our S = 3 and S = 4, on the FLOP-balanced split: ``DEEP``), each as ``sequential``,
  ``stale`` and ``hybrid`` (stale for the first half, then sequential), seeds 0, 1, 2, for the
  recipe in :data:`RECIPES` (He et al.'s CIFAR schedule: 160 epochs, step lr at 50 % / 75 %).
* **two GPUs, executor** (when two are visible): the paper's 2-GPU table, ResNet-56/110/224/362
  split after residual group 1 (PPV 19/37/75/121): ``sequential`` on one GPU, ``stale`` and
  ``hybrid`` on two, seed 0 (the paper reports one run per cell), same recipe.

Every job writes into its own folder under ``--out`` and is **resumable**: a study skips the runs
already in its ``results.jsonl`` (same config), an executor run checkpoints and resumes, and a
finished job leaves ``done.json`` (written atomically) so a re-run skips it. Before starting it
prints a **time estimate** per job (:func:`estimate`): the roofline of the GPU class at the
precision torch runs float32 in on CUDA (TF32 convolutions, IEEE matmuls) with eager
PyTorch's host overhead per op (the per-op model of
:func:`stalesim.workloads.hardware.roofline_profile`), the one-GPU studies ``jobs`` runs at a
time (:func:`default_jobs`: as many as the GPU's free memory and the CPU cores allow); it is
replaced by the measured rate as soon as runs finish. ``--dry-run`` plans without a GPU for
a named ``--gpu``. At the end the small artifacts go to ``--results`` and the GPU tables of
``docs/RESULTS.md`` are regenerated from them (:mod:`lab.reproduce.tables`).

``--smoke`` runs the same pipeline with 2 iterations per job, batch 8, synthetic data and one
seed on the CPU (the executor part on 2 gloo ranks), so CI checks it end to end in seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.figures.common import SHAPE_PROFILES
from stalesim.limits import MAX_JOBS, check_int
from stalesim.summary import get as summary_get

CIFAR_TRAIN = 50_000
PAPER_4STAGE = {"alexnet": "3", "vgg16": "2", "resnet20": "7"}  # the paper's "4-stage" PPVs (our S = 2)
DEEP = ("S3", "S4")  # the paper's 6- and 8-stage pipelines: our S = 3, 4 (balanced split)
TWO_GPU = {"resnet56": "19", "resnet110": "37", "resnet224": "75", "resnet362": "121"}


@dataclass(frozen=True)
class Recipe:
    """Optimizer and length of one model's CIFAR-10 training (what ``stalesim study`` gets)."""

    epochs: int = 160
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    batch_size: int = 128
    lr_schedule: str = "step"
    source: str = "He et al. 2016 CIFAR recipe (64k iterations ~ 164 epochs; lr /10 at 50 % and 75 %)"


RECIPES = {
    "resnet20": Recipe(),
    "resnet56": Recipe(), "resnet110": Recipe(), "resnet224": Recipe(), "resnet362": Recipe(),
    # no recipe for these two is given with the paper's accuracies: same length and schedule,
    # the lr and weight decay commonly used for them on CIFAR-10 (our choice, stated in the docs)
    "alexnet": Recipe(lr=0.01, weight_decay=5e-4, source="our choice: 160 epochs, step lr, lr 0.01, wd 5e-4"),
    "vgg16": Recipe(lr=0.01, weight_decay=5e-4, source="our choice: 160 epochs, step lr, lr 0.01, wd 5e-4"),
}


@dataclass(frozen=True)
class Scale:
    """How big the jobs are: the paper's (``PAPER``) or the CPU smoke test's (``SMOKE``)."""

    device: str = "cuda"
    dataset: str = "cifar10"
    seeds: tuple[int, ...] = (0, 1, 2)
    seeds_2gpu: tuple[int, ...] = (0,)
    iterations: int | None = None  # None: the recipe's epochs
    batch_size: int | None = None  # None: the recipe's
    synthetic_size: int | None = None
    two_device_spec: str = "cuda:0,1"
    one_device_spec: str = "cuda:0"
    models_1gpu: tuple[str, ...] = tuple(PAPER_4STAGE)
    models_2gpu: tuple[str, ...] = tuple(TWO_GPU)


PAPER = Scale()
# one model per part: every model takes the same code path (the full plan is checked without running)
SMOKE = Scale(device="cpu", dataset="synthetic", seeds=(0,), iterations=2, batch_size=8, synthetic_size=16,
              two_device_spec="cpu:2", one_device_spec="cpu:1", models_1gpu=("resnet20",),
              models_2gpu=("resnet56",))


@dataclass(frozen=True)
class Job:
    """One unit of work: a ``stalesim study`` (emulator) or a ``stalesim run`` (executor)."""

    name: str
    kind: str  # "study" | "run"
    model: str
    argv: tuple[str, ...]
    runs: int
    iterations: int  # per run
    schedule: str = ""
    ppv: str = ""
    devices: int = 1
    info: dict[str, Any] = field(default_factory=dict)


def _length(scale: Scale, r: Recipe) -> tuple[list[str], int, list[str]]:
    """(length args, iterations per run, hybrid switch args) for this scale and recipe."""
    bs = scale.batch_size or r.batch_size
    if scale.iterations is not None:
        n = scale.iterations
        return ["--iterations", str(n)], n, ["--switch", str(max(1, n // 2))]
    per_epoch = CIFAR_TRAIN // bs
    return ["--epochs", str(r.epochs)], r.epochs * per_epoch, ["--switch-epoch", str(r.epochs // 2)]


def _train_args(model: str, scale: Scale, data_dir: str | None) -> tuple[list[str], int, list[str]]:
    r = RECIPES[model]
    length, iters, switch = _length(scale, r)
    args = ["--model", model, "--dataset", scale.dataset, "--batch-size", str(scale.batch_size or r.batch_size),
            "--lr", str(r.lr), "--momentum", str(r.momentum), "--weight-decay", str(r.weight_decay),
            "--lr-schedule", r.lr_schedule, *length]
    if data_dir and scale.dataset != "synthetic":
        args += ["--data-dir", data_dir]
    if scale.synthetic_size:
        args += ["--synthetic-size", str(scale.synthetic_size)]
    return args, iters, switch


def plan(scale: Scale = PAPER, *, two_gpus: bool = False, data_dir: str | None = None,
         jobs: int = 1) -> list[Job]:
    """The jobs, in the order they run: one-GPU studies (each ``jobs`` runs at a time, at
    most its run count), then the 2-GPU runs if ``two_gpus``."""
    from stalesim.schedule import get_spec

    check_int("--jobs", jobs, lo=1, hi=MAX_JOBS)
    out: list[Job] = []
    seeds = ",".join(map(str, scale.seeds))
    for model in scale.models_1gpu:
        ppv = PAPER_4STAGE[model]
        args, iters, switch = _train_args(model, scale, data_dir)
        places = ";".join([ppv.replace(" ", ""), *DEEP])
        n_places = 1 + len(DEEP)
        # sequential does not depend on the placement: the study runs it once per seed
        runs = len(scale.seeds) * (1 + n_places)
        out.append(Job(f"{model}_cifar10_stale", "study", model,
                       ("study", *args, "--device", scale.device, "--schedules", "sequential,stale",
                        "--placements", places, "--seeds", seeds, "--jobs", str(min(jobs, runs)), "--quiet"),
                       runs=runs, iterations=iters))
        runs = len(scale.seeds) * n_places
        out.append(Job(f"{model}_cifar10_hybrid", "study", model,
                       ("study", *args, *switch, "--device", scale.device, "--schedule", "hybrid",
                        "--schedules", "hybrid", "--placements", places, "--seeds", seeds,
                        "--jobs", str(min(jobs, runs)), "--quiet"), runs=runs, iterations=iters))
    if two_gpus:
        for model in scale.models_2gpu:
            ppv = TWO_GPU[model]
            args, iters, switch = _train_args(model, scale, data_dir)
            for seed in scale.seeds_2gpu:
                for sched, devs in (("sequential", scale.one_device_spec), ("stale", scale.two_device_spec),
                                    ("hybrid", scale.two_device_spec)):
                    spec = get_spec(sched)
                    extra = [] if spec.placement_free else ["--ppv", ppv]
                    extra += switch if spec.switches else []
                    out.append(Job(f"{model}_2gpu_{sched}_seed{seed}", "run", model,
                                   ("run", *args, "--schedule", sched, *extra, "--seed", str(seed),
                                    "--devices", devs, "--checkpoint-every", "1000"),
                                   runs=1, iterations=iters, schedule=sched, ppv=ppv,
                                   devices=1 if spec.placement_free else 2))
    return out


# --------------------------------------------------------------------------- estimate
# GPU memory one study process may take: CUDA context (~0.5 GB), the caching allocator's
# pool for a CIFAR network at batch 128 (VGG-16's activations are ~1-2 GB) and cuDNN
# workspaces, with headroom: a guess, not a measurement (no GPU in the sessions that built it)
JOB_GPU_BYTES = 8 * 2**30


def default_jobs(free_bytes: float, cpus: int | None) -> int:
    """Study processes to run at once on one GPU: as many as ``JOB_GPU_BYTES`` each fit in
    ``free_bytes``, at most one per CPU core (eager PyTorch keeps a core busy per process
    launching kernels), at least 1."""
    by_memory = int(max(0.0, float(free_bytes)) // JOB_GPU_BYTES)
    return max(1, min(by_memory, cpus or 1, MAX_JOBS))


def detect_gpu() -> tuple[str | None, float | None]:
    """(catalog device of the visible GPU 0 by name and total memory, its free bytes); (None,
    None) without a GPU, (None, free) for a GPU the catalog lacks."""
    import torch

    if not torch.cuda.is_available():
        return None, None
    from stalesim.workloads.hardware import gpu_catalog_key

    props = torch.cuda.get_device_properties(0)
    free, _ = torch.cuda.mem_get_info(0)
    return gpu_catalog_key(torch.cuda.get_device_name(0), float(props.total_memory)), float(free)


def detect_gpu_class() -> str | None:
    """The catalog device for the visible GPU 0, or None without a GPU / for an unknown part."""
    return detect_gpu()[0]


def cuda_precision() -> Any:
    """The precision float32 training runs in on CUDA under torch's switches as they are here
    (by default TF32 convolutions, IEEE matmuls): what the estimate's peaks follow."""
    import torch

    from stalesim.workloads.profiler import precision_in_force

    return precision_in_force(torch.device("cuda"), torch.float32)


def roofline_seconds_per_iteration(model: str, device: str, batch: int, profiles: Path,
                                   schedule: str = "sequential", ppv: str = "", *,
                                   overhead_model: str = "per-op", launch_overhead_s: float | None = None,
                                   precision: Any = None) -> float:
    """Roofline iteration time of ``model`` at ``batch`` on ``device`` (shape profile, fp32 at
    ``precision``), with eager PyTorch's host overhead per op (``overhead_model``)."""
    from stalesim.figures.common import shape_profile
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate
    from stalesim.workloads.hardware import roofline_profile

    prof = roofline_profile(shape_profile(model, profiles).at_batch_size(batch), device, "float32",
                            precision=precision, overhead_model=overhead_model,
                            launch_overhead_s=launch_overhead_s)
    opts = SimOptions(method="fast", keep_timeline=False, ppv=tuple(int(p) for p in ppv.split(",")) if ppv else None)
    stages = len(ppv.split(",")) + 1 if ppv else 1
    from stalesim.schedule import get_spec

    # a switching schedule (hybrid): its mean over a run switching half-way
    cfg = (ScheduleConfig(schedule, stages=stages, batches=400, switch=200) if get_spec(schedule).switches
           else ScheduleConfig(schedule, stages=stages))
    r = simulate(prof, cfg, options=opts)
    return r.iteration_time_s


def job_parallelism(job: Job) -> int:
    """Runs of ``job`` at a time (a study's ``--jobs``; an executor run: 1)."""
    if job.kind == "study" and "--jobs" in job.argv:
        return max(1, int(job.argv[job.argv.index("--jobs") + 1]))
    return 1


def estimate(jobs: list[Job], device: str, profiles: Path, scale: Scale,
             precision: Any = None) -> list[dict[str, Any]]:
    """Hours per job, emulated staleness costing what sequential costs.

    One run's iteration: the per-op roofline (``roofline_s``: each phase the longer of the
    GPU's roofline and eager PyTorch's host time) and the GPU's alone (``device_s``, no host
    overhead). ``k`` runs at a time overlap their host work but share the GPU: the job takes
    ``max(roofline_s / k, device_s)`` (``wall_s``)."""
    rows = []
    cache: dict[tuple, tuple[float, float]] = {}
    for j in jobs:
        bs = scale.batch_size or RECIPES[j.model].batch_size
        key = (j.model, j.schedule if j.kind == "run" else "sequential", j.ppv if j.kind == "run" else "")
        if key not in cache:
            kw = {"schedule": key[1], "ppv": key[2], "precision": precision}
            cache[key] = (roofline_seconds_per_iteration(j.model, device, bs, profiles, **kw),
                          roofline_seconds_per_iteration(j.model, device, bs, profiles, overhead_model="per-op",
                                                         launch_overhead_s=0.0, **kw))
        it_s, dev_s = cache[key]
        work = j.runs * j.iterations
        k = job_parallelism(j)
        rows.append({"job": j.name, "runs": j.runs, "iterations_per_run": j.iterations, "parallel": k,
                     "roofline_s": work * it_s, "device_s": work * dev_s,
                     "wall_s": max(work * it_s / k, work * dev_s)})
    return rows


def measured_ratio(out: Path, jobs: list[Job], est: list[dict[str, Any]]) -> float | None:
    """Measured / estimated time over the runs finished so far (None before the first).

    A study's runs report their own wall time, ``parallel`` of them at once: each is
    compared with one run's serial estimate."""
    meas = roof = 0.0
    for j, e in zip(jobs, est, strict=True):
        for r in _finished(out / j.name, j):
            meas += float(r.get("wall_time_s") or r.get("wall_s") or 0.0)
            roof += e["roofline_s"] / j.runs
    return meas / roof if roof > 0 and meas > 0 else None


def _finished(folder: Path, job: Job) -> list[dict[str, Any]]:
    if job.kind == "study":
        f = folder / "results.jsonl"
        return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.exists() else []
    f = folder / "done.json"
    return [json.loads(f.read_text())] if f.exists() else []


def _op_overhead_us() -> float:
    from stalesim.workloads.hardware import DEFAULT_OP_OVERHEAD_S

    return DEFAULT_OP_OVERHEAD_S * 1e6


def format_estimate(jobs: list[Job], est: list[dict[str, Any]], device: str, ratio: float | None,
                    out: Path) -> str:
    lines = [f"reproduce-gpu: {len(jobs)} jobs, {sum(j.runs for j in jobs)} runs; time on {device}"
             + (f" (measured rate so far: {ratio:.1f}x the estimate)" if ratio else
                " (roofline estimate: peak FLOP/s at TF32 for convolutions, bandwidth, eager PyTorch's "
                f"~{_op_overhead_us():.1f} us host overhead per op, runs of a study in parallel; no kernel "
                "efficiency, no data loading: expect more until runs finish and the measured rate replaces it)")]
    total = 0.0
    for j, e in zip(jobs, est, strict=True):
        left = j.runs - len(_finished(out / j.name, j))
        t = e["wall_s"] * (ratio or 1.0) * left / j.runs
        total += t
        lines.append(f"  {j.name:32s} {left:3d}/{j.runs:<3d} runs left x {j.iterations} it, "
                     f"{job_parallelism(j)} at a time  ~{t / 3600:8.2f} h")
    lines.append(f"  total left ~{total / 3600:.1f} h")
    return "\n".join(lines)


# --------------------------------------------------------------------------- running
def run_job(job: Job, out: Path, cli: Callable[[list[str]], int] | None = None) -> None:
    """Run one job into ``out/<job.name>`` unless its ``done.json`` is there."""
    from stalesim.atomic import ensure_dir, write_text_atomic

    folder = ensure_dir(out / job.name)
    if (folder / "done.json").exists():
        return
    if cli is None:
        from stalesim.cli import main

        cli = main
    argv = list(job.argv)
    if job.kind == "study":
        argv += ["--out", str(folder)]
    else:
        argv += ["--out", str(folder / "run")]
        if any((folder / "run" / "checkpoints").glob("k*")):
            argv.append("--resume")
    t0 = time.perf_counter()
    rc = cli(argv)
    if rc != 0:
        raise StalesimError(f"{job.name}: stalesim {argv[0]} exited with {rc}")
    done: dict[str, Any] = {"job": job.name, "argv": argv, "wall_s": time.perf_counter() - t0}
    if job.kind == "run":
        summ = json.loads((folder / "run" / "summary.json").read_text())
        done.update({k: summary_get(summ, k) for k in ("schedule", "iteration_time_s", "final_test_accuracy",
                                                       "final_loss", "diverged", "steps_done", "devices",
                                                       "device_kind")})
        done.update({"model": job.model, "ppv": job.ppv})
    write_text_atomic(folder / "done.json", json.dumps(done, indent=1) + "\n")


def store(jobs: list[Job], out: Path, results: Path) -> None:
    """Copy each finished job's small artifacts to ``results`` (studies) or one JSONL (2-GPU)."""
    from lab.reproduce.store import store_study
    from stalesim.atomic import ensure_dir, write_lines_atomic

    ensure_dir(results)
    two = []
    for j in jobs:
        folder = out / j.name
        if not (folder / "done.json").exists():
            continue
        if j.kind == "study":
            store_study(folder, results / j.name, command="stalesim " + " ".join(j.argv) + f" --out {folder}")
        else:
            two.append(json.loads((folder / "done.json").read_text()))
    if two:
        write_lines_atomic(results / "two_gpu_runs.jsonl", [json.dumps(r) for r in two])


def reproduce(out: Path, results: Path, *, scale: Scale = PAPER, device_class: str | None = None,
              two_gpus: bool | None = None, data_dir: str | None = None, dry_run: bool = False,
              results_md: Path | None = None, root: Path = Path("."), profiles: Path = SHAPE_PROFILES,
              jobs: int | None = None, log: Callable[[str], None] = print) -> list[Job]:
    """Plan, estimate, run what is not done, store artifacts, regenerate the GPU tables.

    ``dry_run`` plans and estimates only, and needs no GPU when ``device_class`` names one
    (the 2-GPU part is then planned too unless ``two_gpus`` is False). ``jobs``: the
    one-GPU studies' runs at a time (default :func:`default_jobs` of the GPU's free
    memory, or of the named class's memory without a GPU)."""
    import os

    import torch

    gpu_key, free = detect_gpu() if scale.device == "cuda" else (None, None)
    if scale.device == "cuda" and free is None and not dry_run:
        raise StalesimError("reproduce-gpu: no CUDA device visible (use --smoke for the CPU pipeline check, "
                            "or --dry-run --gpu <class> to plan)")
    if scale.device == "cuda" and free is None and device_class is None:
        from stalesim.workloads.hardware import device_names

        raise StalesimError("--gpu: no CUDA device visible; name the GPU class to plan for "
                            f"({', '.join(k for k in device_names() if k != 'cpu-core')})")
    if device_class is not None:
        from stalesim.workloads.hardware import get_device

        try:
            spec = get_device(device_class)
        except StalesimError as exc:
            raise StalesimError(f"--gpu: {exc}") from None
        device_class = spec.key
    else:
        device_class = gpu_key if scale.device == "cuda" else "cpu-core"
        if device_class is None:  # a GPU the catalog lacks: the estimate uses the H100's figures
            log("  (GPU not in the catalog: estimating with h100-sxm; pass --gpu to choose)")
            device_class = "h100-sxm"
    if two_gpus is None:
        two_gpus = scale.device == "cuda" and (torch.cuda.device_count() >= 2 if free is not None else dry_run)
    if jobs is None:
        if scale.device == "cuda":
            from stalesim.workloads.hardware import get_device

            jobs = default_jobs(free if free is not None else get_device(device_class).memory_bytes,
                                os.cpu_count())
        else:
            jobs = 1
    plan_jobs = plan(scale, two_gpus=two_gpus, data_dir=data_dir, jobs=jobs)
    precision = cuda_precision() if scale.device == "cuda" else None
    est = estimate(plan_jobs, device_class, profiles, scale, precision=precision)
    log(format_estimate(plan_jobs, est, device_class, measured_ratio(out, plan_jobs, est), out))
    if not two_gpus:
        log("  (2-GPU ResNet table skipped: fewer than two GPUs visible)")
    elif free is None and scale.device == "cuda":
        log("  (no GPU visible: planned for one and two GPUs of this class)")
    if dry_run:
        return plan_jobs
    for k, j in enumerate(plan_jobs):
        log(f"[{k + 1}/{len(plan_jobs)}] {j.name}")
        run_job(j, out)
        ratio = measured_ratio(out, plan_jobs, est)
        if ratio:
            left = sum(e["wall_s"] * ratio * (j2.runs - len(_finished(out / j2.name, j2))) / j2.runs
                       for j2, e in zip(plan_jobs, est, strict=True))
            log(f"  measured {ratio:.1f}x the estimate; ~{left / 3600:.2f} h left")
    store(plan_jobs, out, results)
    if results_md is not None:
        from lab.reproduce.tables import GPU_RENDERERS, write

        write(results_md, root, only=set(GPU_RENDERERS))
        log(f"regenerated the GPU tables of {results_md}")
    return plan_jobs
