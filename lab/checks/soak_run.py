"""Soak test of ``stalesim run``: many short jobs back to back, counting failures and leftovers.

    python -m lab.checks.soak_run                 # 50 jobs (about 5 min on 2 quiet cores)
    python -m lab.checks.soak_run --jobs 10 --json soak.json

Each job is the real user path (``python -m stalesim run ...`` in a fresh
process: launcher, rendezvous, ranks, gather, teardown) with a schedule from a
fixed mix of pipeline and data-parallel schedules on 2 and 3 ranks, synthetic
data, with and without the final evaluation and a run folder. A job fails if it
exits non-zero, prints anything that looks like a crash (``terminate called``,
``Traceback``, ``SIGABRT``, a core dump), or its summary is incomplete. After
each job, every process that inherited the job's unique environment tag is a
leftover (a rank that outlived its launcher). Exit status 0 only with 0
failures and 0 leftovers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# the folder holding the `stalesim` package: every job imports the same code as this process
ROOT = Path(__file__).resolve().parents[2]
TAG = "STALESIM_SOAK_TAG"
CRASH_WORDS = ("terminate called", "Traceback", "SIGABRT", "core dumped", "Segmentation fault",
               "Fatal Python error")

# (schedule flags, ranks)
MIX: list[tuple[list[str], int]] = [
    (["--schedule", "stale", "--stages", "2"], 2),
    (["--schedule", "1f1b", "--stages", "2", "--microbatches", "2"], 2),
    (["--schedule", "dp", "--stages", "1", "--workers", "2"], 2),
    (["--schedule", "gpipe", "--stages", "3", "--microbatches", "3"], 3),
    (["--schedule", "pipedream", "--stages", "3"], 3),
    (["--schedule", "2bw", "--stages", "2", "--microbatches", "2"], 2),
    (["--schedule", "pipe-sgd", "--stages", "1", "--workers", "2", "--warmup", "1"], 2),
    (["--schedule", "local", "--stages", "3"], 3),
    (["--schedule", "hybrid", "--stages", "2"], 2),
    (["--schedule", "sequential", "--stages", "3"], 3),
]


def tagged_processes(tag: str) -> list[int]:
    """PIDs whose environment carries ``TAG=tag`` (the job's ranks and launcher)."""
    needle = f"{TAG}={tag}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(int(d.name))
    return out


def one_job(i: int, work: Path, timeout_s: float) -> dict:
    flags, ranks = MIX[i % len(MIX)]
    tag = f"{uuid.uuid4().hex}-{i}"
    with_out = i % 2 == 0
    out = work / f"run{i}"
    cmd = [sys.executable, "-m", "stalesim", "run", "--model", "lenet5", "--dataset", "synthetic",
           *flags, "--devices", f"cpu:{ranks}", "--iterations", "12", "--batch-size", "12",
           "--synthetic-size", "96", "--timeout", "60", "--json"]
    cmd += ["--out", str(out)] if with_out else ["--no-eval", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env[TAG] = tag
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout = -999, (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        stderr = (exc.stderr or "") if isinstance(exc.stderr, str) else ""
        stderr += f"\nsoak: timed out after {timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    time.sleep(0.2)  # a killed rank's exit is asynchronous: give the kernel a moment
    left = tagged_processes(tag)
    problems = []
    if rc != 0:
        problems.append(f"exit status {rc}")
    problems += [f"stderr mentions {w!r}" for w in CRASH_WORDS if w in stderr]
    if rc == 0:
        try:
            s = json.loads(stdout)
            if len(s["losses"]) != 12 or not (out / "summary.json").is_file():
                problems.append("incomplete summary")
        except (ValueError, KeyError) as exc:
            problems.append(f"unreadable summary ({type(exc).__name__})")
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return {"job": i, "schedule": flags[1], "ranks": ranks, "rc": rc, "wall_s": round(wall, 2),
            "leftover_pids": left, "problems": problems, "stderr_tail": last[-400:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.checks.soak_run", description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job before it counts as hung")
    ap.add_argument("--json", default=None, help="also write the per-job records here")
    args = ap.parse_args(argv)
    records = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stalesim-soak-") as d:
        for i in range(args.jobs):
            r = one_job(i, Path(d), args.timeout)
            records.append(r)
            status = "ok" if not r["problems"] and not r["leftover_pids"] else "FAIL " + "; ".join(
                r["problems"] + [f"leftover pids {r['leftover_pids']}"] * bool(r["leftover_pids"]))
            print(f"[{i + 1:3d}/{args.jobs}] {r['schedule']:<10} cpu:{r['ranks']} {r['wall_s']:6.1f} s  {status}"
                  + (f"\n      {r['stderr_tail']}" if r["problems"] else ""), flush=True)
    failures = sum(1 for r in records if r["problems"])
    leftovers = sum(len(r["leftover_pids"]) for r in records)
    walls = sorted(r["wall_s"] for r in records)
    print(f"soak: {len(records)} jobs in {time.perf_counter() - t0:.0f} s, failures {failures}, "
          f"leftover processes {leftovers}; job wall median {walls[len(walls) // 2]:.1f} s "
          f"(min {walls[0]:.1f}, max {walls[-1]:.1f})")
    if args.json:
        from stalesim.atomic import write_json_atomic

        write_json_atomic(args.json, {"failures": failures, "leftover_processes": leftovers, "jobs": records})
    return 0 if failures == 0 and leftovers == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
