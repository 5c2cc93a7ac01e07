"""A sweep's points as launcher jobs (``sweep --launcher local|slurm|ray --out DIR``).

The sweep decides what runs: its points, less those whose rows a sweep folder already
keeps, in chunks of points (one job each: a Slurm task or a Ray task costs seconds to
start, a point ~10 ms to simulate). A launcher (:mod:`stalesim.launch`) only places the
jobs; each job simulates its chunk with the sweep's picklable worker, so a row is the
same wherever it was computed (the simulation is deterministic).

Resume is the study's: every finished chunk's rows are appended to ``<out>/rows.jsonl``
with the point and a digest of the sweep's settings (profile, method, batch size,
cluster, ...), and a sweep run again into the same folder with the same settings
simulates only the points that have no row there. A job that fails (its process died)
does not stop the others: when they are kept, one error names the failed jobs and their
logs (``<out>/logs/<job>.log``). The folder's lock holds across processes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from stalesim.atomic import AppendLog
from stalesim.errors import StalesimError
from stalesim.launch import Job, LaunchSpec, make_launcher
from stalesim.outlock import folder_lock

#: chunks per parallel job slot: enough to even out chunks of unequal cost, few enough that
#: task start-up (seconds on Slurm or Ray) stays small beside the simulations
CHUNKS_PER_JOB = 4
#: the failed jobs named in the error (the rest are counted; their logs are in logs/)
_NAMED_FAILURES = 5
ROWS_FILE = "rows.jsonl"


def point_key(point: Any) -> str:
    """A point as a stable string (its fields as JSON): what a kept row is matched by."""
    return json.dumps(asdict(point), sort_keys=True)


def _plain(obj: Any) -> Any:
    """An object of the worker's state as JSON can hold it: a dataclass (the cost model's
    predictor and calibration) by its fields, anything else by its repr less a memory
    address (which differs in every process and would make every kept row look stale)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def settings_digest(worker: Any) -> str:
    """A digest of everything but the points that decides a row (the worker's pickled state):
    rows kept from a sweep with other settings are not reused."""
    text = json.dumps(worker.__getstate__(), sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def simulate_chunk(worker: Callable[[Any], dict[str, Any]], points: list[Any]) -> list[dict[str, Any]]:
    """A job: the rows of ``points`` (in order), simulated in the job's process."""
    return [worker(pt) for pt in points]


def _kept(out: Path, digest: str) -> dict[str, dict[str, Any]]:
    path = out / ROWS_FILE
    if not path.is_file():
        return {}
    kept: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: its chunk runs again
            continue
        if isinstance(rec, dict) and rec.get("settings") == digest and isinstance(rec.get("row"), dict):
            kept[str(rec.get("point"))] = rec["row"]
    return kept


def chunk_jobs(worker: Any, points: Sequence[Any], *, jobs: int, out: Path) -> list[Job]:
    """The jobs of ``points``: ``jobs x CHUNKS_PER_JOB`` chunks at most, in order."""
    if not points:
        return []
    size = math.ceil(len(points) / min(len(points), jobs * CHUNKS_PER_JOB))
    out_jobs = []
    for start in range(0, len(points), size):
        chunk = list(points[start:start + size])
        jid = f"points{start:05d}-{start + len(chunk) - 1:05d}"
        out_jobs.append(Job(jid, simulate_chunk, (worker, chunk), out / "logs" / f"{jid}.log"))
    return out_jobs


def run_sweep_jobs(worker: Any, points: Sequence[Any], *, jobs: int, launcher: LaunchSpec,
                   out: Path) -> list[dict[str, Any]]:
    """The rows of every point (in the points' order), the kept ones read from ``out`` and the
    others simulated as launcher jobs; see the module doc."""
    digest = settings_digest(worker)
    with folder_lock(out):
        kept = _kept(out, digest)
        todo = [pt for pt in points if point_key(pt) not in kept]
        place = make_launcher(launcher, jobs=jobs, threads=1, folder=out / "logs")
        lines = (json.dumps({"settings": digest, "point": key, "row": row}) for key, row in kept.items())
        with AppendLog(out / ROWS_FILE, lines) as log:
            for job, rows in place.run(chunk_jobs(worker, todo, jobs=jobs, out=out)):
                for pt, row in zip(job.args[1], rows):
                    line = json.dumps({"settings": digest, "point": point_key(pt), "row": row})
                    log.write_line(line)
                    # the row as the file keeps it: a sweep run again gives the very same rows
                    kept[point_key(pt)] = json.loads(line)["row"]
    if place.failures:
        failed = place.failures
        more = f"; and {len(failed) - _NAMED_FAILURES} more (logs/)" if len(failed) > _NAMED_FAILURES else ""
        raise StalesimError(f"sweep: {len(failed)} job(s) failed, the other rows are kept in {out / ROWS_FILE} "
                            "(run the same sweep again to simulate only these): "
                            + "; ".join(f.describe() for f in failed[:_NAMED_FAILURES]) + more)
    return [kept[point_key(pt)] for pt in points]
