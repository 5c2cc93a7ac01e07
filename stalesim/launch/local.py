"""The default launcher: a pool of ``jobs`` processes on this machine (spawned, so no
parent state leaks in; each dies with the study, so a killed study leaves no orphan
writing into folders its ``--resume`` is about to use)."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from stalesim.launch.jobs import Job, JobFailure, call_logged, last_line
from stalesim.lifetime import die_with_parent


class LocalLauncher:
    def __init__(self, *, jobs: int) -> None:
        self.jobs = jobs
        self.failures: list[JobFailure] = []

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        if not jobs:
            return
        with ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                                 initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            futs = {pool.submit(call_logged, job): job for job in jobs}
            for fut in as_completed(futs):
                job = futs[fut]
                try:
                    res = fut.result()
                except Exception as exc:  # BrokenProcessPool too: the job's process died
                    self.failures.append(JobFailure(job.run_id, job.log, last_line(exc)))
                    continue
                yield job, res
