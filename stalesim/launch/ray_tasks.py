"""``--launcher ray``: a study's jobs as Ray core tasks.

Without ``--ray-address`` Ray starts a local instance with ``jobs x threads`` CPUs
(``ray.init(num_cpus=...)``), so at most ``--jobs`` tasks run at once as with the
process pool; with an address (``auto`` on a cluster node, or ``ray://head:10001``)
the tasks go to that cluster, each asking for ``threads`` CPUs and ``--slurm-gpus``-like
GPUs per task (``gpus``), and the cluster's free resources decide how many run. A task
whose worker process dies is retried by Ray (``max_retries``) with the job's
``requeue_args``: the run continues from its last checkpoint. A task that raises is not
retried: it is reported with its run id and log, and the others go on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import ray

from stalesim.errors import StalesimError
from stalesim.launch.jobs import Job, JobFailure, LaunchSpec, call_logged, last_line

# a worker lost to a node failure or the OOM killer is retried this many times (Ray's default)
_MAX_RETRIES = 3


def _resumed(job: Job) -> Any:
    return call_logged(replace(job, args=job.requeue_args or job.args))


class RayLauncher:
    def __init__(self, spec: LaunchSpec, *, jobs: int, threads: int) -> None:
        self.address = spec.ray_address
        self.cpus = threads
        self.gpus = spec.slurm_gpus
        self.capacity = jobs * threads
        self.failures: list[JobFailure] = []

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        if not jobs:
            return
        started_here = not ray.is_initialized()
        if started_here:
            if self.address is None:
                ray.init(num_cpus=self.capacity, include_dashboard=False, log_to_driver=False)
            else:
                try:
                    ray.init(address=self.address, log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    raise StalesimError(f"ray_address: cannot join the Ray cluster at {self.address!r} "
                                        f"({last_line(exc)})") from None
        try:
            # a retried task runs the job's resume form (its first try left a checkpoint, if any)
            first = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)(call_logged)
            again = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=_MAX_RETRIES)(_resumed)
            pending = {first.remote(job): (job, True) for job in jobs}
            while pending:
                [ref], _ = ray.wait(list(pending), num_returns=1)
                job, first_try = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the job raised: its log says why
                    self.failures.append(JobFailure(job.run_id, job.log, last_line(exc.cause or exc)))
                except ray.exceptions.RayError as exc:  # the worker or its node was lost
                    if first_try:
                        pending[again.remote(job)] = (job, False)
                    else:
                        self.failures.append(JobFailure(job.run_id, job.log, last_line(exc)))
                else:
                    yield job, res
        finally:
            if started_here:
                ray.shutdown()
