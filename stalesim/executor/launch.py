"""Local launch: spawn one process per device, watch them, gather the results.

``run_local(jobs, devices)`` starts ``world`` child processes
(``python -m stalesim.executor --spec FILE``) with the torchrun environment (RANK,
WORLD_SIZE, LOCAL_RANK), so the rank code is the same as under ``torchrun``.
The launcher:

- rendezvouses the ranks through a ``FileStore`` in a private 0700 folder with
  gloo/NCCL sockets on the loopback interface, so a local run opens no port on
  any other interface (:mod:`stalesim.rendezvous`); only an explicit
  ``master_addr`` (``--master-addr``, ``STALESIM_MASTER_ADDR``) selects the
  TCP rendezvous (``MASTER_ADDR``/``MASTER_PORT``, resolved up front);
- sets the CPU thread count
  *before* the child imports torch (OMP/MKL variables, then ``set_num_threads``);
- starts each child in its own session and asks the kernel to kill it if the
  launcher dies (no orphans);
- polls the children; when one fails it gives the others a short grace period
  to report (they see the broken connection, or their per-operation deadline
  passes) and then SIGKILLs whatever is left, so every rank is gone within
  ``timeout + grace`` seconds of a failure;
- raises :class:`ExecutorError` (a ``StalesimError``: CLI exit status 2) whose
  one-line message names each failed rank and the action it was in.

Several jobs (e.g. every schedule of a test) can share one process group: the
ranks run them back to back, which pays the torch import and rendezvous once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from stalesim.atomic import ensure_dir, write_text_atomic
from stalesim.devices import Devices, parse_devices
from stalesim.errors import StalesimError
from stalesim.rendezvous import LOCAL_ADDR, PrivateStoreDir, check_master_addr, free_port
from stalesim.threads import DEFAULT_THREADS


class DeviceSpec(TypedDict):
    """The devices of a run as the ranks get them (the spec file's ``devices``; ``stalesim run``
    under torchrun builds the same): :meth:`stalesim.executor.rank.RankContext.create` reads it."""

    kind: str  # "cpu" or "cuda"
    ids: list[int] | None  # CUDA device ids (None: one per local rank, in order)


class ExecutorError(StalesimError):
    """The distributed run failed (a rank crashed, hung or raised)."""


def _child_stdout() -> int | None:
    """Ranks print their progress to our stderr, so stdout stays clean for ``--json``.

    Inside Jupyter (or any host whose ``sys.stderr`` is not a real file) there is
    no file descriptor to hand over; the ranks then inherit the process's own
    stdout instead of failing to start.
    """
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def _thread_env(threads: int) -> dict[str, str]:
    t = str(threads)
    return {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
            "STALESIM_EXECUTOR_THREADS": t}


def run_local(jobs: Mapping[str, object] | Sequence[Mapping[str, object]], devices: Devices | str, *,
              timeout_s: float = 60.0, threads: int = DEFAULT_THREADS, grace_s: float | None = None,
              env: dict[str, str] | None = None, workdir: str | os.PathLike[str] | None = None,
              master_addr: str | None = None) -> Any:
    """Run one job (dict) or several (list) on ``devices``; return the summary (or list).

    A job is the JSON-able spec built by :func:`stalesim.executor.spec.make_job` (its keys are
    :class:`stalesim.executor.spec.Job`'s; the launcher only writes it to the spec file, so any
    JSON-able dict passes). The summaries are what rank 0 computed (the same dict ``--json``
    prints): :class:`stalesim.summary.RunSummary`'s JSON form, returned as ``Any`` because one
    call returns one summary or a list of them and its callers (``stalesim.api.run`` marks it)
    index the summaries without checking.
    """
    devs = parse_devices(devices) if isinstance(devices, str) else devices
    addr = master_addr or os.environ.get("STALESIM_MASTER_ADDR") or None
    if addr is not None:  # an explicit TCP rendezvous: check it before spawning anything
        addr = check_master_addr(addr, "--master-addr" if master_addr else "STALESIM_MASTER_ADDR")
        port = free_port(addr if addr != "localhost" else LOCAL_ADDR)
    single = isinstance(jobs, dict)
    job_list = [jobs] if single else list(jobs)
    world = devs.count
    grace = float(grace_s if grace_s is not None else min(3.0, max(1.0, timeout_s)))
    own_tmp = None
    if workdir is None:
        own_tmp = tempfile.TemporaryDirectory(prefix="stalesim-exec-")
        workdir = own_tmp.name
    wd = Path(workdir)
    ensure_dir(wd)
    # the folder that holds the stalesim package (stalesim/executor/launch.py -> parents[2]), first
    # on the ranks' path: they import the same stalesim as this process, installed or not (never
    # the package folder itself, whose modules would shadow top-level names such as trace)
    root = str(Path(__file__).resolve().parents[2])
    base = dict(os.environ)
    base.update(env or {})
    base.update(_thread_env(threads))
    for k in ("MASTER_ADDR", "MASTER_PORT"):
        base.pop(k, None)
    if addr is not None:
        base.update({"MASTER_ADDR": addr, "MASTER_PORT": str(port)})
    base.update({"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
                 "STALESIM_EXECUTOR_LAUNCHED": "1", "PYTHONUNBUFFERED": "1"})
    base["PYTHONPATH"] = root + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    store_dir = PrivateStoreDir() if addr is None else None
    procs: list[subprocess.Popen] = []
    try:
        rdzv = {"kind": "file", "path": str(store_dir.store_path)} if store_dir else {"kind": "env"}
        device_spec: DeviceSpec = {"kind": devs.kind, "ids": list(devs.ids)}
        spec = {"jobs": job_list, "devices": device_spec,
                "timeout_s": float(timeout_s), "threads": int(threads), "workdir": str(wd),
                "rendezvous": rdzv}
        spec_path = wd / "spec.json"
        write_text_atomic(spec_path, json.dumps(spec))
        for r in range(world):
            e = dict(base, RANK=str(r), LOCAL_RANK=str(r), GROUP_RANK="0")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "stalesim.executor", "--spec", str(spec_path)],
                env=e, stdout=_child_stdout(), stderr=None, start_new_session=True,
            ))
        codes, killed = _watch(procs, grace)
    except BaseException:
        _kill_all(procs)
        raise
    finally:
        if store_dir is not None:
            store_dir.cleanup()
    if any(c != 0 for c in codes):
        raise ExecutorError(_failure_message(wd, codes, killed))
    results = []
    for i in range(len(job_list)):
        path = wd / f"result{i}.json"
        if not path.exists():
            raise ExecutorError(f"rank 0 exited cleanly but wrote no result for job {i}")
        results.append(json.loads(path.read_text()))
    if own_tmp is not None:
        own_tmp.cleanup()
    return results[0] if single else results


def _watch(procs: list[subprocess.Popen], grace: float) -> tuple[list[int], set[int]]:
    """Wait for all children; after the first failure, kill survivors after ``grace``."""
    codes: list[int | None] = [None] * len(procs)
    killed: set[int] = set()
    first_fail: float | None = None
    while True:
        for r, p in enumerate(procs):
            if codes[r] is None:
                c = p.poll()
                if c is not None:
                    codes[r] = c
                    if c != 0 and first_fail is None:
                        first_fail = time.monotonic()
        if all(c is not None for c in codes):
            return [int(c) for c in codes], killed  # type: ignore[arg-type]
        if first_fail is not None and time.monotonic() - first_fail > grace:
            for r, p in enumerate(procs):
                if codes[r] is None:
                    killed.add(r)
                    _kill(p)
            for r, p in enumerate(procs):
                if codes[r] is None:
                    codes[r] = p.wait()
            return [int(c) for c in codes], killed  # type: ignore[arg-type]
        time.sleep(0.02)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the child leads its own session/group
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            p.kill()


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            _kill(p)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def _failure_message(wd: Path, codes: list[int], killed: set[int]) -> str:
    from stalesim.executor.faults import read_beacon

    parts: list[tuple[int, str]] = []
    for r, c in enumerate(codes):
        if c == 0:
            continue
        where = read_beacon(wd / f"rank{r}.beacon")
        at = f" during {where}" if where else ""
        err_path = wd / f"rank{r}.error.json"
        if r in killed:
            parts.append((2, f"rank {r} did not exit after the failure and was killed{at}"))
        elif err_path.exists():
            try:
                info = json.loads(err_path.read_text())
                msg = info.get("message", "")
            except (OSError, ValueError):
                msg = f"rank {r} failed{at}"
            rank_prefix = f"rank {r}:"
            text = msg if msg.startswith((rank_prefix, f"rank {r} ")) else f"rank {r}: {msg}"
            lost = "lost the connection" in msg
            parts.append((1 if lost else 0, text))
        elif c < 0:
            try:
                sig = signal.Signals(-c).name
            except ValueError:
                sig = f"signal {-c}"
            parts.append((0, f"rank {r} was killed by {sig}{at}"))
        else:
            parts.append((0, f"rank {r} exited with status {c}{at}"))
    parts.sort(key=lambda x: x[0])
    return "executor failed: " + "; ".join(p for _, p in parts)
