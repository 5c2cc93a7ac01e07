"""The message-stall experiment: do gloo's threads wait for a core while the ranks compute?

``python -m experiments.bench_stalls [--model resnet32] [--batch-size 64] [--schedules 1f1b,...]
[--iterations 30] [--repeats 3] [--conditions base,pin,threads2,nice,spin] [--out DIR]``

``python -m experiments.bench_stalls --validate DIR [--schedules ...]``: no run; for the
first repeat of each schedule of a ``validate`` folder, the stalls and what surrounded
them (:func:`stall_context`).

Run it through ``/work/shared/tools/quiet run``. On a 2-core machine two ranks that compute
keep both cores busy; the hypothesis under test is that a gloo thread woken by socket
traffic (the receiver's reading loop, a sender's writes beyond the socket buffer) then
waits for a core -- up to a scheduler slice -- and the message arrives milliseconds late.
Each condition changes only who may take a core, the same schedules run in every one, and
the conditions alternate round-robin (``--repeats`` rounds, rotated order):

* ``base``: one torch thread per rank, the kernel places every thread;
* ``pin``: every thread of rank r pinned to core r (``os.sched_setaffinity`` per thread):
  a rank's gloo threads can only take their own rank's core;
* ``threads2``: two torch threads per rank (four compute threads on two cores);
* ``nice``: one torch thread, each rank's main (compute) thread at nice 10 and its other
  threads at 0, so a woken gloo thread preempts its own rank's computation (every rank
  has its own session, hence its own autogroup: nice acts inside the rank);
* ``spin``: as ``base``, plus one busy-looping process per core at the lowest possible
  priority (a cgroup with ``cpu.idle = 1`` and ``SCHED_IDLE``): any runnable thread takes
  the core at once, but no vCPU ever halts, so a wake-up never waits for an idle virtual
  CPU to be woken by the host (the VM's halt/wake path is the other candidate cause).

Per condition and schedule: iteration time (steady window), receives whose message
arrived more than ``--stall-ms`` after its send was posted (stall rate over all
receives, the mean stall, the sum of stall time per iteration), and per rank the
kernel's run-queue wait (``/proc/<pid>/task/<tid>/schedstat``, field 2) of the main
thread and of all other threads (gloo's), sampled every 20 ms from this process, over
the whole run (setup included) and per received message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

CONDITIONS = ("base", "pin", "threads2", "nice", "spin")
SPIN_CGROUP = Path("/sys/fs/cgroup/cpu/stalesim-stall-spin")


class RankWatcher(threading.Thread):
    """Polls this process's child processes (the ranks): applies the condition to each of
    their threads and keeps the latest schedstat of every thread."""

    def __init__(self, condition: str, period_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.condition, self.period_s = condition, period_s
        self.stop = threading.Event()
        self.stats: dict[tuple[int, int], tuple[str, int, int, int]] = {}  # (pid, tid) -> comm, run, wait, n
        self.rank_of: dict[int, int] = {}
        self.applied: set[tuple[int, int]] = set()

    def _children(self) -> list[int]:
        me = os.getpid()
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/stat") as fh:
                    st = fh.read()
            except OSError:
                continue
            if int(st.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(p))
        return out

    def _rank(self, pid: int) -> int | None:
        if pid not in self.rank_of:
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                return None
            for e in env:
                if e.startswith(b"RANK="):
                    self.rank_of[pid] = int(e[5:])
        return self.rank_of.get(pid)

    def _apply(self, pid: int, tid: int, rank: int) -> None:
        if self.condition == "pin":
            os.sched_setaffinity(tid, {rank % (os.cpu_count() or 1)})
        elif self.condition == "nice":
            # threads inherit nice from the thread that creates them: reset the others each poll
            os.setpriority(os.PRIO_PROCESS, tid, 10 if tid == pid else 0)
            return
        self.applied.add((pid, tid))

    def poll(self) -> None:
        for pid in self._children():
            rank = self._rank(pid)
            if rank is None:
                continue
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                try:
                    if (pid, tid) not in self.applied:
                        self._apply(pid, tid, rank)
                    comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                    run, wait, n = (int(x) for x in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
                except (OSError, ValueError):
                    continue
                self.stats[(pid, tid)] = (comm, run, wait, n)

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.period_s)

    def per_rank(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for (pid, tid), (comm, run, wait, n) in self.stats.items():
            r = out.setdefault(str(self.rank_of.get(pid)), {"main_run_s": 0.0, "main_wait_s": 0.0,
                                                             "other_run_s": 0.0, "other_wait_s": 0.0,
                                                             "other_threads": 0, "threads": []})
            part = "main" if tid == pid else "other"
            r[f"{part}_run_s"] += run / 1e9
            r[f"{part}_wait_s"] += wait / 1e9
            if part == "other":
                r["other_threads"] += 1
            r["threads"].append({"tid": tid, "comm": comm, "run_s": run / 1e9, "wait_s": wait / 1e9,
                                 "slices": n})
        return out


def stalls(rows: dict[str, list[list[Any]]], window_s: tuple[float, float], iteration_s: float,
           stall_s: float) -> dict[str, Any]:
    """Receives inside the window: how many waited for a message that arrived more than
    ``stall_s`` after its send was posted, and what those stalls sum to per iteration."""
    from stalesim.validate.costmodel import message_delays

    d = message_delays(rows, window_s)
    delays = [x for o in d.values() for x in o["delays_s"]]
    n = sum(o["blocked"] + o["ready"] for o in d.values())
    st = [x for x in delays if x > stall_s]
    its = (window_s[1] - window_s[0]) / iteration_s if iteration_s > 0 else 1.0
    return {"receives": n, "blocked": len(delays), "stalled": len(st),
            "stall_rate": len(st) / n if n else None,
            "median_delay_ms": 1e3 * statistics.median(delays) if delays else None,
            "mean_stall_ms": 1e3 * statistics.fmean(st) if st else 0.0,
            "stall_ms_per_iteration": 1e3 * sum(st) / its,
            "receives_per_iteration": n / its}


def stall_context(rows: dict[str, list[list[Any]]], stall_s: float = 1e-3) -> dict[str, Any]:
    """For every receive that waited (started before its send's post ended): was it a stall
    (its message came more than ``stall_s`` after the post), what fraction of the stall the
    *sender* spent computing (its core busy; the waiting receiver's core free), and how long
    the send's post took (gloo writes the payload in the posting thread when the receive
    was announced: long posts; a short one leaves the write to its background thread)."""
    from stalesim.schedule import Action
    from stalesim.schedule.actions import COMPUTE_KIND_NAMES
    from stalesim.schedule.deps import peer

    by = {r[0]: (d, r) for d, rs in rows.items() for r in rs}
    n = 0
    stalled: list[tuple[float, float]] = []  # (sender computing fraction, post s)
    fine: list[float] = []  # post s
    for label, (_d, r) in by.items():
        if not str(r[1]).startswith("RECV"):
            continue
        pk = peer(Action.parse(label))
        got = by.get(str(Action(pk[0], pk[2], pk[3], pk[4], pk[1]))) if pk else None
        if got is None:
            continue
        n += 1
        sd, s = got
        if r[6] >= s[7]:
            continue
        if r[7] - s[7] > stall_s:
            busy = sum(max(0.0, min(x[7], r[7]) - max(x[6], s[7])) for x in rows[sd] if x[1] in COMPUTE_KIND_NAMES)
            stalled.append((busy / (r[7] - s[7]), s[7] - s[6]))
        else:
            fine.append(s[7] - s[6])

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    return {"receives": n, "stalls": len(stalled), "waited_not_stalled": len(fine),
            "stall_rate": len(stalled) / n if n else None,
            "sender_computing_during_stall": med([b for b, _p in stalled]),
            "stalls_with_sender_idle": sum(1 for b, _p in stalled if b < 0.1),
            "post_ms_stalled": None if not stalled else 1e3 * statistics.median(p for _b, p in stalled),
            "post_ms_not_stalled": None if not fine else 1e3 * statistics.median(fine),
            "short_posts_among_stalled": sum(1 for _b, p in stalled if p < 2e-4)}


def from_validate(out: Path, names: list[str] | None) -> list[str]:
    """:func:`stall_context` for the first repeat of each schedule of a validate folder."""
    from experiments.attribute_validate import rows_from_trace

    L = ["| schedule | receives | stalls | stall rate | sender computing during a stall (median) | "
         "stalls with the sender idle | post ms, stalled / other waited-for messages | short posts among stalls |",
         "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    summary = json.loads((out / "summary.json").read_text())
    for row in summary["rows"]:
        name = row["schedule"]
        trace = out / "runs" / name / "trace.json"
        if (names and name not in names) or not trace.exists():
            continue
        c = stall_context(rows_from_trace(trace))
        if not c["receives"]:
            continue

        def f(x: float | None, fmt: str) -> str:
            return "n/a" if x is None else format(x, fmt)

        L.append(f"| {name} | {c['receives']} | {c['stalls']} | {f(c['stall_rate'], '.0%')} | "
                 f"{f(c['sender_computing_during_stall'], '.2f')} | {c['stalls_with_sender_idle']} | "
                 f"{f(c['post_ms_stalled'], '.2f')} / {f(c['post_ms_not_stalled'], '.2f')} | "
                 f"{c['short_posts_among_stalled']} |")
    return L


def _configs(args: argparse.Namespace) -> list[Any]:
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import get_spec

    out = []
    for name in args.schedules.split(","):
        spec = get_spec(name)
        out.append(TrainConfig(model=args.model, dataset="synthetic", schedule=name,
                               stages=2 * spec.stages_per_device,
                               microbatches=args.microbatches if spec.uses_micro else 1,
                               iterations=args.iterations, batch_size=args.batch_size,
                               synthetic_size=args.batch_size * 8, lr=0.05).check())
    return out


class Spinners:
    """One SCHED_IDLE busy loop per core inside an idle cgroup (see ``spin``); removed on exit."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.note = ""

    def __enter__(self) -> Spinners:
        import subprocess

        code = ("import os,sys; os.sched_setaffinity(0,{int(sys.argv[1])}); "
                "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True: pass")
        for c in range(os.cpu_count() or 1):
            self.procs.append(subprocess.Popen([sys.executable, "-c", code, str(c)]))
        try:
            SPIN_CGROUP.mkdir(exist_ok=True)
            (SPIN_CGROUP / "cpu.idle").write_text("1")
            for p in self.procs:
                (SPIN_CGROUP / "cgroup.procs").write_text(str(p.pid))
            self.note = "idle cgroup + SCHED_IDLE"
        except OSError as exc:
            self.note = f"SCHED_IDLE only (no idle cgroup: {exc})"
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        with contextlib.suppress(OSError):
            SPIN_CGROUP.rmdir()


def run_condition(condition: str, cfgs: list[Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    from stalesim.executor import make_job, run_local
    from stalesim.schedule import build_schedule
    from stalesim.validate.measured import measured_timing

    threads = 2 if condition == "threads2" else 1
    jobs = [make_job(c, keep_rows=True, evaluate=False, label=c.schedule) for c in cfgs]
    w = RankWatcher(condition)
    w.start()
    t0 = time.perf_counter()
    try:
        with Spinners() if condition == "spin" else contextlib.nullcontext():
            res = run_local(jobs, "cpu:2", timeout_s=120, threads=threads)
    finally:
        w.stop.set()
        w.join()
    wall = time.perf_counter() - t0
    ranks = w.per_rank()
    out = []
    for c, r in zip(cfgs, res):
        mt = measured_timing(r, build_schedule(c.schedule_config(c.iterations)))
        s = stalls(r["rows"], tuple(mt["window_s"]), mt["iteration_time_s"], args.stall_ms / 1e3)
        out.append({"condition": condition, "schedule": c.schedule,
                    "iteration_time_ms": 1e3 * mt["iteration_time_s"], **s})
    n_recv = sum(len([x for x in rr["rows"][d] if str(x[1]).startswith("RECV")])
                 for rr in res for d in rr["rows"])
    for o in out:
        o["sched"] = {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items()
                          if kk != "threads"} for k, v in ranks.items()}
        o["other_wait_ms_per_receive"] = (1e3 * sum(v["other_wait_s"] for v in ranks.values()) / n_recv
                                          if n_recv else None)
        o["main_wait_ms_per_receive"] = (1e3 * sum(v["main_wait_s"] for v in ranks.values()) / n_recv
                                         if n_recv else None)
        o["process_group_wall_s"] = wall
    if args.threads_detail:
        out[0]["threads_detail"] = ranks
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet32")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--schedules", default="1f1b,interleaved-1f1b")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--stall-ms", type=float, default=1.0)
    ap.add_argument("--threads-detail", action="store_true", help="keep every thread's schedstat")
    ap.add_argument("--out", default=None, help="folder for stalls.json")
    ap.add_argument("--validate", type=Path, default=None,
                    help="no run: the stalls of a validate folder's first repeats (and what surrounded them)")
    args = ap.parse_args(argv)
    if args.validate is not None:
        given = [] if "--schedules" not in " ".join(argv or sys.argv) else args.schedules.split(",")
        print("\n".join(from_validate(args.validate, given)))
        return 0
    conds = args.conditions.split(",")
    for c in conds:
        if c not in CONDITIONS:
            ap.error(f"--conditions: unknown {c!r} (one of {', '.join(CONDITIONS)})")
    cfgs = _configs(args)
    rows: list[dict[str, Any]] = []
    for k in range(args.repeats):
        order = conds[k % len(conds):] + conds[:k % len(conds)]
        for c in order:
            got = run_condition(c, cfgs, args)
            for g in got:
                g["round"] = k
                print(json.dumps({x: g[x] for x in ("round", "condition", "schedule", "iteration_time_ms",
                                                    "stall_rate", "stall_ms_per_iteration",
                                                    "other_wait_ms_per_receive", "main_wait_ms_per_receive")}),
                      flush=True)
            rows += got
    table = summarize(rows)
    for line in table:
        print(line)
    if args.out:
        from stalesim.atomic import ensure_dir, write_json_atomic, write_text_atomic

        ensure_dir(args.out)
        write_json_atomic(Path(args.out) / "stalls.json", {"command": " ".join(sys.argv),
                                                           "args": vars(args), "rows": rows})
        write_text_atomic(Path(args.out) / "stalls.md", "\n".join(table) + "\n")
    return 0


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Median over rounds per condition and schedule, with the range."""
    def cell(xs: list[float], fmt: str) -> str:
        xs = [x for x in xs if x is not None]
        if not xs:
            return "n/a"
        return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"

    keys = sorted({(r["schedule"], r["condition"]) for r in rows},
                  key=lambda k: (k[0], CONDITIONS.index(k[1])))
    L = ["| schedule | condition | iteration ms | stall rate | stall ms / iteration | mean stall ms | "
         "gloo-thread run-queue wait ms / receive | main-thread run-queue wait ms / receive |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s, c in keys:
        rs = [r for r in rows if r["schedule"] == s and r["condition"] == c]
        L.append(f"| {s} | {c} | {cell([r['iteration_time_ms'] for r in rs], '.1f')} | "
                 f"{cell([r['stall_rate'] for r in rs], '.1%')} | "
                 f"{cell([r['stall_ms_per_iteration'] for r in rs], '.2f')} | "
                 f"{cell([r['mean_stall_ms'] for r in rs], '.2f')} | "
                 f"{cell([r['other_wait_ms_per_receive'] for r in rs], '.3f')} | "
                 f"{cell([r['main_wait_ms_per_receive'] for r in rs], '.3f')} |")
    return L


if __name__ == "__main__":
    raise SystemExit(main())
