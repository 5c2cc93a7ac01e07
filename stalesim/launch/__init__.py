"""Launchers: where a study's independent jobs run (this machine's processes, Slurm, Ray).

The study decides *what* runs (its grid, what resume skips, how runs are batched) and
hands a list of :class:`~stalesim.launch.jobs.Job` to a launcher, which only *places*
them: :mod:`.local` (a process pool here, the default), :mod:`.slurm` (submitit: a Slurm
job array, or submitit's local executor for trying it without a cluster) and
:mod:`.ray_tasks` (Ray core tasks on a local instance or a cluster). Every launcher
returns each job's result as it finishes and the failed jobs with their run id and log,
so one failure never stops the others. submitit and Ray are optional extras
(``pip install stalesim[slurm]``, ``stalesim[ray]``); :func:`make_launcher` names the
extra in a one-line error when it is missing.
"""

from __future__ import annotations

from pathlib import Path

from stalesim.launch.jobs import RAY, SLURM, Job, JobFailure, Launcher, LaunchSpec

__all__ = ["Job", "JobFailure", "LaunchSpec", "Launcher", "make_launcher"]


def make_launcher(spec: LaunchSpec, *, jobs: int, threads: int, folder: Path) -> Launcher:
    """The launcher for ``spec``: at most ``jobs`` jobs at once (``threads`` CPUs each);
    its own files (submitit's pickles and logs) under ``folder``."""
    spec.check()
    if spec.launcher == SLURM:
        from stalesim.launch.slurm import SlurmLauncher

        return SlurmLauncher(spec, jobs=jobs, threads=threads, folder=folder)
    if spec.launcher == RAY:
        from stalesim.launch.ray_tasks import RayLauncher

        return RayLauncher(spec, jobs=jobs, threads=threads)
    from stalesim.launch.local import LocalLauncher

    return LocalLauncher(jobs=jobs)
