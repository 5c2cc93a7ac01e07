"""The job spec: what the process that starts a run hands every rank.

A job is a JSON-able dict (:func:`make_job`): the run's :class:`TrainConfig`, checked
once where the run starts, and the fingerprint of the schedule built from it
(:meth:`stalesim.schedule.Schedule.fingerprint`), plus the run folder and checkpoint
settings. Each rank rebuilds the schedule from the config (a schedule is as big as the
run; its config is a few fields) and verifies the fingerprint (:func:`verify_schedule`)
instead of checking the config again: a job edited on the way, or ranks running other
schedule code, is refused in one line rather than trained on another schedule.
Torch-free, so the CLI can plan a run before any rank or torch starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from stalesim.errors import StalesimError
from stalesim.plugins import import_roots
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import Schedule


class _LaunchFields(TypedDict, total=False):
    """What ``stalesim run`` adds to a job after :func:`make_job` (``build_job`` in
    :mod:`stalesim.cli.run_cmd`); rank 0 copies them into the run folder's ``config.json``.
    Absent from the jobs of the API, ``validate`` and ``plan``."""

    devices: str
    timeout_s: float
    threads: int


class Job(_LaunchFields):
    """The job :func:`make_job` makes: its keys, checked by mypy where it is made and
    wherever a rank reads it (:mod:`stalesim.executor.job`, ``checkpoint``, ``results``,
    ``tb_live``). At run time a plain dict, so its JSON form (the spec file the launcher
    writes) is unchanged."""

    #: :meth:`TrainConfig.to_dict`: the config's own fields (TrainConfig is their typed form)
    train: dict[str, Any]
    schedule_fingerprint: str | None  # None: counted in epochs, known once the data set is read
    out: str | None
    checkpoint_every: int
    resume: str | None
    evaluate: bool
    label: str | None
    keep_rows: bool
    deterministic: bool
    import_roots: list[str]
    tensorboard: str | None
    tensorboard_every: int


def make_job(cfg: TrainConfig | Mapping[str, object], *, out: str | None = None, checkpoint_every: int = 0,
             resume: str | None = None, evaluate: bool = True, label: str | None = None,
             keep_rows: bool = False, deterministic: bool = False,
             schedule: Schedule | None = None, tensorboard: str | None = None,
             tensorboard_every: int = 1) -> Job:
    """The JSON-able description of one run (``cfg``: TrainConfig or its dict).

    The config is checked here, once, where the run starts (a caller that passes the
    ``schedule`` it built from a checked config has done both): the job carries the config
    and the fingerprint of the run's schedule, and every rank verifies that the schedule it
    builds from the config has that fingerprint (:func:`verify_schedule`) instead of
    checking the config again. A run counted in epochs (or switching at an epoch) has no
    fingerprint: its length is known only once rank 0 has read the data set.

    ``keep_rows``: the summary also carries every rank's per-action timings and the
    versions each runtime used (tests); ``deterministic``: the ranks run deterministic
    kernels (:func:`stalesim.executor.job.prepare_determinism`). ``tensorboard``: a folder
    the loss-stage rank writes the per-step loss to as it trains, read from the device every
    ``tensorboard_every`` batches (:mod:`stalesim.executor.tb_live`).
    """
    if schedule is None:
        tc = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_dict(dict(cfg))
        schedule = job_schedule(tc.check())
    d: dict[str, Any] = cfg.to_dict() if isinstance(cfg, TrainConfig) else dict(cfg)
    # the user's --model/--dataset modules (pkg.module:factory): the ranks, other processes,
    # put the folders they were imported from here on their sys.path before importing them
    roots = import_roots([d.get("model"), d.get("dataset")])
    job: Job = {"train": d, "schedule_fingerprint": None if schedule is None else schedule.fingerprint(),
                "out": out, "checkpoint_every": int(checkpoint_every or 0),
                "resume": resume, "evaluate": bool(evaluate), "label": label, "keep_rows": keep_rows,
                "deterministic": bool(deterministic), "import_roots": roots,
                "tensorboard": tensorboard, "tensorboard_every": max(int(tensorboard_every), 1)}
    return job


def needs_data_count(cfg: TrainConfig) -> bool:
    """Whether the run's schedule depends on the data set's size (batches per epoch): a
    run counted in epochs, or one that switches at an epoch."""
    return cfg.iterations is None or cfg.switch_epoch is not None


def job_schedule(cfg: TrainConfig) -> Schedule | None:
    """The schedule of a run of the checked config ``cfg``, built once where the run starts;
    None when the data set fixes its length (:func:`needs_data_count`)."""
    return None if needs_data_count(cfg) else plan(cfg)[1]


def expected_devices(cfg: TrainConfig, sched: Schedule | None = None) -> int:
    """Devices (ranks) the run of ``cfg`` needs: its schedule's (``sched``, built once by
    :func:`job_schedule`), or, for a run counted in epochs (no schedule before the data set
    is read), a short build of the same config's (the device count does not depend on the
    length)."""
    if sched is not None:
        return int(sched.num_devices)
    if cfg.schedule_file is not None:  # the file's own length (None: as many batches as it holds)
        return int(cfg.build_schedule(cfg.iterations).num_devices)
    n = cfg.iterations if cfg.iterations is not None else 2
    return int(cfg.build_schedule(max(1, min(n, 4))).num_devices)


def verify_schedule(job: Job, sched: Schedule) -> None:
    """Refuse to run a schedule other than the one the job was made for: the rank built
    ``sched`` from the job's config, and its fingerprint must be the job's (a job spec
    edited after it was made, or ranks running another version of the schedule code)."""
    want = job.get("schedule_fingerprint")
    if want is None:
        return
    got = sched.fingerprint()
    if got != want:
        raise StalesimError(
            f"schedule_fingerprint: the job was made for schedule {str(want)[:12]} but its config "
            f"builds {got[:12]} here ({sched.name}); the job spec was changed after it was made, "
            "or this rank runs other schedule code")


def plan(cfg: TrainConfig, batches_per_epoch: int | None = None) -> tuple[int, Schedule]:
    """(total batches, schedule) for a config; usable without torch. The schedule comes
    from the one IR call every consumer makes with the run's config."""
    if cfg.iterations is None and batches_per_epoch is None:
        raise StalesimError("epochs: the executor needs the dataset size to count batches")
    N = cfg.total_iterations(batches_per_epoch or 0)
    return N, cfg.build_schedule(N, batches_per_epoch)
