"""What a launcher is given (jobs) and gives back (results, failures), and the launch spec."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stalesim.errors import StalesimError

#: the launchers ``--launcher`` accepts (local is today's process pool)
LAUNCHERS = ("local", "slurm", "ray")
LOCAL, SLURM, RAY = LAUNCHERS

#: launcher -> (module to import, the extra that installs it)
EXTRAS = {SLURM: ("submitit", "slurm"), RAY: ("ray", "ray")}


@dataclass(frozen=True)
class Job:
    """One independent piece of a study: ``fn(*args)`` (a module-level function, so that it
    pickles by reference), known by ``run_id``, its output and traceback in ``log``.
    ``requeue_args`` are the args of a second start after the job was preempted or lost
    (continue from the run's checkpoint); ``None``: start it the same way again."""

    run_id: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    log: Path
    requeue_args: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class JobFailure:
    """A job that raised (or whose process died): the run id, its log and the error's last line."""

    run_id: str
    log: Path
    error: str

    def describe(self) -> str:
        return f"{self.run_id} ({self.error}; log: {self.log})"


@dataclass(frozen=True)
class LaunchSpec:
    """Where jobs run, as plain data (the CLI builds it; :func:`make_launcher` turns it into
    a launcher only when there is something to run).

    ``slurm_*`` are per task: partition, time limit (minutes), GPUs, CPUs and memory (GB);
    ``slurm_array_parallelism`` the array's tasks at once (default ``--jobs``) and
    ``slurm_sbatch`` further sbatch options (:mod:`stalesim.launch.slurm_config`); ``local``
    runs a slurm launch through submitit's local executor (real subprocesses and pickled
    jobs, no cluster). ``ray_address`` joins a running Ray cluster (``auto`` or
    ``ray://host:port``); without it Ray starts a local instance sized for ``--jobs``.
    """

    launcher: str = "local"
    local: bool = False
    slurm_partition: str | None = None
    slurm_time_min: int = 60
    slurm_gpus: int = 0
    slurm_cpus: int | None = None
    slurm_mem_gb: float | None = None
    slurm_array_parallelism: int | None = None
    slurm_sbatch: tuple[tuple[str, str | int | float | bool], ...] = ()
    ray_address: str | None = None

    def check(self) -> LaunchSpec:
        if self.launcher not in LAUNCHERS:
            raise StalesimError(f"launcher: unknown {self.launcher!r} (known: {', '.join(LAUNCHERS)})")
        if self.launcher != SLURM and (self.local or self.slurm_partition is not None or self.slurm_sbatch
                                       or self.slurm_array_parallelism is not None):
            raise StalesimError("launcher: --local and --slurm-* are for --launcher slurm")
        if self.launcher != RAY and self.ray_address is not None:
            raise StalesimError("launcher: --ray-address is for --launcher ray")
        check_installed(self.launcher)
        if self.launcher == SLURM and not self.local and not (shutil.which("sbatch") and shutil.which("srun")):
            raise StalesimError("launcher: --launcher slurm submits with sbatch, which is not on this machine's "
                                "PATH (run it on the cluster's login node, or try it here with --local)")
        return self

    @property
    def on_this_machine(self) -> bool:
        """Whether the jobs share this machine's memory (so the study's memory preflight applies)."""
        return self.launcher == LOCAL or (self.launcher == SLURM and self.local) or \
            (self.launcher == RAY and self.ray_address is None)


def check_installed(launcher: str) -> None:
    """A one-line error naming the extra when the launcher's engine is not installed."""
    if launcher not in EXTRAS:
        return
    module, extra = EXTRAS[launcher]
    try:
        __import__(module)
    except ImportError:
        raise StalesimError(f"launcher: --launcher {launcher} needs {module}: "
                            f"pip install stalesim[{extra}]") from None


class Launcher(Protocol):
    """Runs jobs, yielding ``(job, result)`` as each finishes; failed jobs are collected in
    ``failures`` instead of stopping the others."""

    failures: list[JobFailure]

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]: ...


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """The process's stdout and stderr (file descriptors too: native code writes there)
    appended to ``log`` for the block, then restored (a pool worker runs many jobs)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def call_logged(job: Job) -> Any:
    """Run ``job`` in this (worker) process with its output and any traceback in ``job.log``,
    so that a failure reported by run id points at a file that says why."""
    with _output_to(job.log):
        try:
            return job.fn(*job.args)
        except BaseException:
            # to the descriptor (the log, here), not sys.stderr: a host (pytest, Ray) may have replaced it
            sys.stderr.flush()
            os.write(2, traceback.format_exc().encode())
            raise


def last_line(exc: BaseException) -> str:
    """An exception as one line (a worker's traceback is in its log, not in the report)."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[-1] if text else type(exc).__name__
