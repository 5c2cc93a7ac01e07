"""``--launcher slurm``: a study's jobs as one Slurm job array through submitit.

submitit pickles each job into ``<out>/logs/submitit/``, submits the array
(``sbatch --array``, at most ``--jobs`` tasks running at once) and unpickles the result
each task writes; ``--local`` uses submitit's local executor instead (the same pickling,
each job a real subprocess of this machine, ``--jobs`` at a time), to try a cluster run
without a cluster. A task that Slurm preempts or times out is requeued by submitit
(:class:`_Task` is checkpointable) with the job's ``requeue_args``: the study's run
continues from its last checkpoint instead of step 0. Options are submitit's
``AutoExecutor`` parameters (``timeout_min``, ``gpus_per_node``, ``cpus_per_task``,
``mem_gb``, ``slurm_partition``, ``slurm_array_parallelism``, and the config file's
further sbatch options as ``slurm_additional_parameters``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import submitit

from stalesim.launch.jobs import Job, JobFailure, LaunchSpec, call_logged, last_line

# seconds between polls of the jobs' states: a local subprocess finishes in seconds, and
# each poll of a cluster's jobs is one sacct call the Slurm admins ask users to keep rare
_POLL_LOCAL_S = 0.2
_POLL_CLUSTER_S = 15.0


class _Task:
    """The pickled callable of every task. submitit calls ``checkpoint`` when Slurm signals a
    preemption or the time limit: what it returns is requeued, here the job with its
    ``requeue_args`` (continue from the checkpoint) instead of its first ``args``."""

    def __call__(self, job: Job) -> Any:
        return call_logged(job)

    def checkpoint(self, job: Job) -> submitit.helpers.DelayedSubmission:
        return submitit.helpers.DelayedSubmission(self, replace(job, args=job.requeue_args or job.args))


class SlurmLauncher:
    def __init__(self, spec: LaunchSpec, *, jobs: int, threads: int, folder: Path) -> None:
        self.local = spec.local
        self.jobs = jobs
        self.folder = folder / "submitit"
        self.failures: list[JobFailure] = []
        self.executor = submitit.AutoExecutor(folder=self.folder, cluster="local" if spec.local else "slurm")
        params: dict[str, Any] = {"name": "stalesim", "timeout_min": spec.slurm_time_min,
                                  "gpus_per_node": spec.slurm_gpus,
                                  "cpus_per_task": spec.slurm_cpus or threads}
        if spec.slurm_mem_gb is not None:
            params["mem_gb"] = spec.slurm_mem_gb
        if not spec.local:
            params["slurm_array_parallelism"] = spec.slurm_array_parallelism or jobs
            if spec.slurm_partition is not None:
                params["slurm_partition"] = spec.slurm_partition
            if spec.slurm_sbatch:
                params["slurm_additional_parameters"] = dict(spec.slurm_sbatch)
        self.executor.update_parameters(**params)

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        if not jobs:
            return
        task = _Task()
        if self.local:
            # the local executor starts every job it is given at once: give it --jobs at a time
            waiting = list(jobs)
            running: list[tuple[Job, submitit.Job[Any]]] = []
            while waiting or running:
                while waiting and len(running) < self.jobs:
                    job = waiting.pop(0)
                    running.append((job, self.executor.submit(task, job)))
                finished = [(j, s) for j, s in running if s.done()]
                if not finished:
                    time.sleep(_POLL_LOCAL_S)
                    continue
                gone = {id(s) for _, s in finished}
                running = [(j, s) for j, s in running if id(s) not in gone]
                for job, sub in finished:
                    out = self._result(job, sub)
                    if out is not None:
                        yield out
            return
        subs = self.executor.map_array(task, jobs)  # one sbatch --array for the whole list
        by_id = {id(s): j for s, j in zip(subs, jobs)}
        for sub in submitit.helpers.as_completed(subs, poll_frequency=_POLL_CLUSTER_S):
            out = self._result(by_id[id(sub)], sub)
            if out is not None:
                yield out

    def _result(self, job: Job, sub: submitit.Job[Any]) -> tuple[Job, Any] | None:
        exc = sub.exception()
        if exc is None:
            return job, sub.result()
        # the job's own log says why; submitit's stderr too when the task died outside Python
        self.failures.append(JobFailure(job.run_id, job.log, f"{last_line(exc)}; submitit log: {sub.paths.stderr}"))
        return None
