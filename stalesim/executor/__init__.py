"""The real executor: the schedule IR's per-device action lists on torch.distributed.

Public API (what ``stalesim run`` and ``validate`` call)::

    from stalesim.executor import run_local, make_job, parse_devices
    summary = run_local(make_job(train_cfg, out="runs/x"), "cpu:2", timeout_s=60, threads=1)

``run_local(jobs, devices, *, timeout_s=60, threads=1) -> dict`` (a list of
jobs gives a list of summaries, all run in one process group). See
docs/executor.md. Importing this package does not import torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExecutorError", "make_job", "parse_devices", "run_local"]


def __getattr__(name: str) -> Any:
    if name in ("run_local", "parse_devices", "ExecutorError", "Devices"):
        from stalesim.executor import launch

        return getattr(launch, name)
    if name == "make_job":
        from stalesim.executor.spec import make_job

        return make_job
    raise AttributeError(name)
