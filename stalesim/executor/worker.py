"""The body of one rank's process: set up, run the jobs, report, exit.

Started either by :func:`stalesim.executor.launch.run_local` (``--spec FILE``) or by
``torchrun ... -m stalesim run <run flags>``; both give the torchrun environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Any failure is
written to ``rank<r>.error.json`` (for the launcher's message) and to stderr
as one line naming the rank and the action, and the process exits with status
2 at once (``os._exit``: a broken process group must not hang the exit). Under
the local launcher the stderr line is left out: the launcher's own one-line
error already names every failed rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _set_threads(threads: int | None) -> None:
    import torch

    from stalesim.runtime.heap import keep_heap

    keep_heap()  # before the first activation: freed ones are reused, not faulted back in
    if threads:
        torch.set_num_threads(int(threads))
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)


def _pin(local_rank: int, device_kind: str, world: int) -> None:
    """With ``STALESIM_PIN=on``, pin a CPU rank to its share of the host's cores before it
    starts a thread (:mod:`stalesim.runtime.affinity`: why, and why not by default)."""
    from stalesim.runtime.affinity import pin_rank

    pin_rank(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", str(world))), device_kind)


def worker_main(spec: dict[str, Any]) -> int:
    """Run every job of ``spec`` on this rank; rank 0 writes ``result<i>.json`` per job.

    ``spec``: the launcher's spec file, parsed (``jobs``, ``devices``, ``timeout_s``, ``threads``,
    ``workdir``, ``rendezvous``), or the dict ``stalesim run`` builds under torchrun (with
    ``print_json``); both are plain JSON read here key by key."""
    from stalesim.executor.faults import Beacon, die_with_parent

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    launched = os.environ.get("STALESIM_EXECUTOR_LAUNCHED") == "1"
    if launched:
        die_with_parent()
    workdir = Path(spec["workdir"]) if spec.get("workdir") else None
    beacon = Beacon(workdir / f"rank{rank}.beacon" if workdir is not None else None)
    threads = spec.get("threads") or int(os.environ.get("STALESIM_EXECUTOR_THREADS", "0") or 0)
    try:
        _pin(local_rank, spec["devices"].get("kind", "cpu"), world)
        _set_threads(threads)
        from stalesim.executor.job import CUBLAS_DETERMINISTIC, run_job

        if spec["devices"].get("kind") == "cuda" and any(j.get("deterministic") for j in spec["jobs"]):
            # before the process group binds the GPU: cuBLAS reads it when it first starts
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
        from stalesim.executor.rank import RankContext

        ctx = RankContext.create(rank=rank, world=world, local_rank=local_rank,
                                 devices=spec["devices"], timeout_s=float(spec.get("timeout_s", 60.0)),
                                 beacon=beacon, rendezvous=spec.get("rendezvous"))
        try:
            for i, job in enumerate(spec["jobs"]):
                result = run_job(job, ctx)
                if rank == 0 and workdir is not None:
                    _write_json(workdir / f"result{i}.json", result)
                if rank == 0 and spec.get("print_json"):
                    json.dump(result, sys.stdout, indent=2)
                    sys.stdout.write("\n")
                    sys.stdout.flush()
        finally:
            ctx.close()
        return 0
    except BaseException as exc:  # noqa: BLE001 - report everything, then exit hard
        msg = _message(rank, exc, beacon.text)
        if workdir is not None:
            with contextlib.suppress(OSError):
                _write_json(workdir / f"rank{rank}.error.json",
                            {"rank": rank, "message": msg, "action": getattr(exc, "action", None),
                             "traceback": traceback.format_exc()[-4000:]})
        if not launched or workdir is None:  # the local launcher reports it in its one line
            print(f"executor: {msg}", file=sys.stderr)
        if os.environ.get("STALESIM_EXECUTOR_DEBUG"):
            traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(2)


def _message(rank: int, exc: BaseException, doing: str = "") -> str:
    from stalesim.errors import StalesimError

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith(f"rank {rank}"):
        return text
    if isinstance(exc, StalesimError):  # already one line for the user: no class name
        return f"rank {rank}: {text}"
    action = getattr(exc, "action", None)
    at = f" at action {action}" if action else (f" during {doing}" if doing else "")
    low = text.lower()
    if isinstance(exc, RuntimeError) and any(w in low for w in ("connection", "closed", "reset by peer")):
        return f"rank {rank}: lost the connection (a peer rank died){at}"
    if isinstance(exc, RuntimeError) and ("timed out" in low or "timeout" in low):
        return f"rank {rank}: timed out{at}"
    if len(text) > 300:
        text = text[:300] + "..."
    return f"rank {rank}: {type(exc).__name__}: {text}{at}"


def _write_json(path: Path, obj: object) -> None:
    from stalesim.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(obj))
