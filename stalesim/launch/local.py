"""The default launcher: a pool of ``jobs`` processes on this machine (spawned, so no
parent state leaks in; each dies with the study, so a killed study leaves no orphan
writing into folders its ``--resume`` is about to use).

A job whose process dies (the OOM killer, a ``kill -9``) breaks the whole pool: every
job still in it fails with ``BrokenProcessPool`` and nothing says which one died. So
the jobs a broken pool did not finish run again, each in a process of its own
(``jobs`` at a time) and from their checkpoints (``requeue_args``): the job that dies
again is the one reported, and the others finish.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from stalesim.launch.jobs import Job, JobFailure, call_logged, last_line
from stalesim.lifetime import Parent, adopt, fresh_context


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=fresh_context(),
                               initializer=adopt, initargs=(Parent.here(),))


class LocalLauncher:
    def __init__(self, *, jobs: int) -> None:
        self.jobs = jobs
        self.failures: list[JobFailure] = []

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        if not jobs:
            return
        broken: list[Job] = []
        with _pool(self.jobs) as pool:
            futs = {pool.submit(call_logged, job): job for job in jobs}
            for fut in as_completed(futs):
                job = futs[fut]
                try:
                    res = fut.result()
                except BrokenProcessPool:
                    broken.append(job)
                    continue
                except Exception as exc:
                    self.failures.append(JobFailure(job.run_id, job.log, last_line(exc)))
                    continue
                yield job, res
        yield from self._isolated([replace(j, args=j.requeue_args or j.args) for j in broken])

    def _isolated(self, jobs: list[Job]) -> Iterator[tuple[Job, Any]]:
        """Each job in a process of its own, ``self.jobs`` at a time: one that dies fails alone."""
        waiting = list(jobs)
        running: dict[Future[Any], tuple[Job, ProcessPoolExecutor]] = {}
        try:
            while waiting or running:
                while waiting and len(running) < self.jobs:
                    job = waiting.pop(0)
                    pool = _pool(1)
                    running[pool.submit(call_logged, job)] = (job, pool)
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    job, pool = running.pop(fut)
                    pool.shutdown()
                    try:
                        res = fut.result()
                    except Exception as exc:  # BrokenProcessPool: this job's own process died
                        self.failures.append(JobFailure(job.run_id, job.log, last_line(exc)))
                        continue
                    yield job, res
        finally:
            for _, pool in running.values():
                pool.shutdown(cancel_futures=True)
