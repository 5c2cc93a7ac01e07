"""Simulator benchmarks: event-path speed, a sweep (goal per 1,000 configurations), fast vs event.

Run: ``python -m benchmarks.bench_sim [--quick]`` (or ``python -m benchmarks sim``); ``--quick``
times every case once and sweeps with the fast path only.
``python -m benchmarks.bench_sim --against OLD.py [--repeats R]`` times another version of
``stalesim/sim/events.py`` (e.g. ``git show main:stalesim/sim/events.py > /tmp/events_old.py``)
against this one on the event-path cases, interleaved, after checking both give the same timelines.
Goals (the simulator must make sweeps cheap): event path >= 300,000 actions/s; a sweep at <= 30 s
per 1,000 configurations on 2 processes; fast path >= 10x faster than the event path.
"""

from __future__ import annotations

import time
from typing import Any

GOAL_ACTIONS_PER_S = 300_000
GOAL_SWEEP_S = 30.0
GOAL_FAST_SPEEDUP = 10.0


def _best(fn, repeat: int = 3) -> float:
    """Best CPU time (process_time) of ``repeat`` runs: robust to other load on the box."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _event_cases() -> list[tuple[str, Any, Any, Any]]:
    """(label, compiled program, stage costs, hardware) of the event-path benchmark."""
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.sim.events import compile_schedule
    from stalesim.sim.model import SimHardware, uniform_costs

    ideal = SimHardware.ideal()
    link = SimHardware(device="gpu", link="pcie", latency_ns=5_000, bandwidth_Bps=2.5e10)
    cpu = SimHardware(device="cpu", link="gloo", latency_ns=20_000, bandwidth_Bps=1e9,
                      comm_overlaps_compute=False, cpu_comm_occupancy=0.5)
    cases = [
        ("pipedream S=8 N=1000 ideal", "pipedream", {"stages": 8, "batches": 1000}, ideal),
        ("stale S=8 N=1000 ideal", "stale", {"stages": 8, "batches": 1000}, ideal),
        ("1f1b S=8 M=8 N=100 pcie", "1f1b", {"stages": 8, "microbatches": 8, "batches": 100}, link),
        ("gpipe S=4 M=16 N=100 pcie", "gpipe", {"stages": 4, "microbatches": 16, "batches": 100}, link),
        ("2bw S=8 M=8 N=100 pcie", "2bw", {"stages": 8, "microbatches": 8, "batches": 100}, link),
        ("dp S=8 P=8 N=100 pcie", "dp", {"stages": 8, "workers": 8, "batches": 100}, link),
        ("pipedream S=4 N=1000 cpu/gloo", "pipedream", {"stages": 4, "batches": 1000}, cpu),
    ]
    out = []
    for label, name, cfg, hw in cases:
        prog = compile_schedule(build_schedule(ScheduleConfig(name, **cfg)))
        costs = uniform_costs(cfg["stages"], 300_000, 600_000, 20_000, msg_bytes=2_000_000,
                              param_bytes=10_000_000)
        out.append((label, prog, costs, hw))
    return out


def event_speed(repeat: int = 5) -> list[tuple[str, int, float]]:
    """(case, actions, seconds) of the engine alone on compiled schedules, best of ``repeat``."""
    from stalesim.sim.events import simulate_program

    return [(label, prog.n_actions, _best(lambda p=prog, c=costs, h=hw: simulate_program(p, c, h), repeat=repeat))
            for label, prog, costs, hw in _event_cases()]


_TIMELINE_FIELDS = ("start", "end", "xfer", "coll_span", "cpu_jobs", "makespan", "batch_done", "compute_busy")


def compare_engines(old_path: str, repeat: int = 9) -> None:
    """Print this engine's and the one in ``old_path``'s speed side by side: per case,
    ``repeat`` rounds alternating which version goes first, medians and [min-max] of
    actions per CPU second. Stops if the two timelines differ anywhere."""
    import importlib.util
    import statistics
    import sys

    from stalesim.sim import events as new

    spec = importlib.util.spec_from_file_location("events_old", old_path)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    sys.modules["events_old"] = old  # dataclasses look their module up
    spec.loader.exec_module(old)
    print(f"event path, old = {old_path}, new = this tree; {repeat} interleaved rounds, "
          "actions per CPU second: median [min-max]")
    for label, prog, costs, hw in _event_cases():
        a, b = old.simulate_program(prog, costs, hw), new.simulate_program(prog, costs, hw)
        if any(getattr(a, f) != getattr(b, f) for f in _TIMELINE_FIELDS):
            raise SystemExit(f"{label}: the two engines' timelines differ")
        times: dict[str, list[float]] = {"old": [], "new": []}
        for i in range(repeat):
            for which in ("old", "new") if i % 2 == 0 else ("new", "old"):
                mod = old if which == "old" else new
                t0 = time.process_time()
                mod.simulate_program(prog, costs, hw)
                times[which].append(time.process_time() - t0)
        n = prog.n_actions
        cols = [f"{w} {n / statistics.median(t) / 1e3:5.0f}k [{n / max(t) / 1e3:.0f}-{n / min(t) / 1e3:.0f}]"
                for w, t in times.items()]
        ratio = statistics.median(times["new"]) / statistics.median(times["old"])
        print(f"  {label:<32} {n:>6} actions  {cols[0]}  {cols[1]}  new/old time {ratio:.3f}", flush=True)
    print("  timelines identical in every case")


def sweep_time(method: str, jobs: int = 2, points: int | None = None) -> tuple[int, float]:
    """Wall time of a sweep of a ResNet-like 20-layer random profile over its whole grid (3,060
    configurations), or over its first ``points``."""
    import random

    from stalesim.sim.sweep import grid, sweep
    from stalesim.workloads.profile import profile_from_dict

    rng = random.Random(0)
    layers = [{"name": f"l{i}", "forward_s": rng.uniform(1e-4, 1e-3),
               "backward_s": rng.uniform(2e-4, 2e-3), "update_s": 1e-5,
               "param_bytes": rng.randint(10**5, 10**7), "output_bytes": rng.randint(10**5, 10**6),
               "saved_bytes": rng.randint(10**5, 10**6), "flops": rng.randint(10**8, 10**9),
               "weight_layers": 1} for i in range(20)]
    prof = profile_from_dict({"schema_version": 1, "model": "bench", "device": "h100-sxm",
                              "dtype": "float32", "batch_size": 128, "layers": layers})
    pts = grid(["gpipe", "1f1b", "pipedream", "stale", "2bw", "local", "dp", "pipe-sgd"],
               [2, 3, 4, 6, 8], microbatches=[1, 2, 4, 8], workers=[2, 4, 8],
               devices=["h100-sxm", "a100-80gb-sxm", "v100-sxm2"],
               links=["nvlink4", "pcie4-x16", "100gbe", "ideal"])[:points]
    t0 = time.perf_counter()
    rows = sweep(prof, pts, jobs=jobs, method=method)
    return len(rows), time.perf_counter() - t0


def fast_vs_event(repeat: int = 3) -> list[tuple[str, float, float, float]]:
    """Per-configuration time of simulate() with each method (schedules cached, as in a sweep),
    best of ``repeat``, and of the fast path's formula alone."""
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate
    from stalesim.sim.events import schedule_for
    from stalesim.sim.fastpath import fast_iteration
    from stalesim.sim.model import SimHardware, uniform_costs

    hw = SimHardware(device="gpu", link="pcie", latency_ns=5_000, bandwidth_Bps=2.5e10)
    out = []
    for name, S, M in [("pipedream", 8, 1), ("stale", 8, 1), ("1f1b", 8, 8), ("gpipe", 4, 8)]:
        c = uniform_costs(S, 300_000, 600_000, msg_bytes=1_000_000)
        cfg = ScheduleConfig(name, stages=S, microbatches=M)
        ev_o, fa_o = SimOptions(keep_timeline=False), SimOptions(method="fast", keep_timeline=False)
        simulate(c, cfg, hw, ev_o)
        simulate(c, cfg, hw, fa_o)
        ev = _best(lambda cfg=cfg, c=c, o=ev_o: simulate(c, cfg, hw, o), repeat=repeat)
        fa = _best(lambda cfg=cfg, c=c, o=fa_o: simulate(c, cfg, hw, o), repeat=repeat)
        short = schedule_for(ScheduleConfig(name, stages=S, microbatches=M, batches=2 * S + 4))
        core = _best(lambda sh=short, c=c: fast_iteration(sh, c, hw), repeat=20 if repeat > 1 else 3)
        out.append((f"{name} S={S} M={M}", ev, fa, core))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="every case once; the sweep's first 100 configurations, fast path only")
    p.add_argument("--against", metavar="OLD.py", help="time this events.py against another version, and stop")
    p.add_argument("--repeats", type=int, default=9, help="--against: interleaved rounds per case")
    args = p.parse_args(argv if argv is not None else [])
    if args.against:
        compare_engines(args.against, args.repeats)
        return 0
    repeat = 1 if args.quick else 3
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cpus {os.cpu_count()}, load average {load:.1f} (times below are CPU seconds "
          "of this process, sweeps are wall time)")
    ev_repeat = 1 if args.quick else 5
    print(f"event path (engine only, compiled schedule, best of {ev_repeat})")
    rates = []
    for label, n, dt in event_speed(repeat=ev_repeat):
        rates.append(n / dt)
        print(f"  {label:<32} {n:>7} actions  {dt * 1e3:8.1f} ms  {n / dt:>10,.0f} actions/s")
    worst = min(rates)
    print(f"  slowest case {worst:,.0f} actions/s vs goal {GOAL_ACTIONS_PER_S:,}: "
          f"{worst / GOAL_ACTIONS_PER_S:.2f}x of goal")
    print(f"fast path vs event path (simulate() per configuration, schedules cached, best of {repeat})")
    ratios = []
    for label, ev, fa, core in fast_vs_event(repeat=repeat):
        ratios.append(ev / fa)
        print(f"  {label:<20} event {ev * 1e3:7.2f} ms  fast {fa * 1e3:6.3f} ms  "
              f"ratio {ev / fa:6.1f}x  (formula alone {core * 1e6:6.1f} us, {ev / core:,.0f}x)")
    print(f"  smallest ratio {min(ratios):.1f}x vs goal {GOAL_FAST_SPEEDUP:.0f}x")
    for method in ("fast",) if args.quick else ("fast", "event"):
        n, dt = sweep_time(method, jobs=2, points=100 if args.quick else None)
        goal = GOAL_SWEEP_S * n / 1000  # the goal is per 1,000 configurations
        print(f"sweep of {n} configurations, {method} path, 2 processes: {dt:.1f} s "
              f"(goal <= {goal:.0f} s: {dt / goal:.2f} of budget)")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
