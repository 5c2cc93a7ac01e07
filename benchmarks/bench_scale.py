"""Cluster-scale prediction: a 4,096-device data x pipeline configuration in <= 1 s on one core.

Run (timings on the shared machine go through ``quiet run``)::

    python -m benchmarks.bench_scale [--quick]

P = 512 data-parallel replicas x S = 8 pipeline stages (4,096 H100s on 512 DGX
H100 nodes: NVLink 4 inside a node, 400 Gb/s InfiniBand NDR per GPU between
nodes), M = 64 micro-batches, 25 MiB gradient buckets. Workload: 8 equal stages
of an 8B-parameter transformer in bf16 (1B parameters = 2 GB per stage), per
micro-batch of one 2,048-token sequence F = 5 ms, B = 10 ms, U = 2 ms, 16 MiB of
activations sent per boundary (2,048 x 4,096 x 2 bytes).

Each repeat is a cold prediction: the schedule and program caches are cleared,
so it builds the IR, simulates and assembles the result (Python already
imported). Reported: median wall time of the repeats, with min and max, CPU
time of the process (one thread: the simulator uses one core), and the load. ``--quick``:
one repeat of two configurations, without the comparison with the full simulation.
"""

from __future__ import annotations

import os
import statistics
import time

GOAL_S = 1.0
REPEATS = 5


def _config():
    from stalesim.sim import SimHardware, uniform_costs
    from stalesim.workloads.hardware import hardware_from_node

    hw = SimHardware.from_hardware(hardware_from_node("dgx-h100"))
    costs = uniform_costs(8, 5_000_000, 10_000_000, 2_000_000, msg_bytes=16 * 2**20, param_bytes=2 * 10**9,
                          saved_bytes=2 * 10**9, batch_size=512 * 64, action_batch=1)
    return hw, costs


def _cold() -> None:
    from stalesim.sim import events, scale

    scale._base.cache_clear()
    scale._program.cache_clear()
    events.schedule_for.cache_clear()
    events.program_for.cache_clear()


def predict(name: str, M: int, N: int | None, P: int = 512, symmetry: bool = True):
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate

    hw, costs = _config()
    cfg = ScheduleConfig(name, stages=8, microbatches=M, batches=N)
    return simulate(costs, cfg, hw, SimOptions(replicas=P, bucket_bytes=25 * 2**20, keep_timeline=False,
                                               symmetry=symmetry))


def timed(name: str, M: int, N: int | None, repeats: int = REPEATS) -> tuple[list[float], list[float], object]:
    walls, cpus, r = [], [], None
    for _ in range(repeats):
        _cold()
        w0, c0 = time.perf_counter(), time.process_time()
        r = predict(name, M, N)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return walls, cpus, r


CASES = (("1f1b", 64, None), ("1f1b", 64, 1000), ("gpipe", 64, 1000), ("2bw", 64, 1000), ("pipedream", 1, 1000))


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one repeat of two configurations")
    args = p.parse_args(argv if argv is not None else [])
    repeats = 1 if args.quick else REPEATS
    cases = (CASES[0], CASES[-1]) if args.quick else CASES
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("4,096 devices = P 512 replicas x S 8 stages on 512 DGX H100 nodes, M = 64, 25 MiB buckets; "
          f"cold prediction, median of {repeats} (min..max)")
    head = f"{'schedule':<10} {'N':>6} {'wall s':>8} {'(min..max)':>15} {'cpu s':>7} {'goal':>6} {'met':>4}  " \
           f"{'batches simulated':>17} {'period':>8} {'iteration ms':>12} {'exposed AR ms':>13}"
    print(head)
    for name, M, N in cases:
        walls, cpus, r = timed(name, M, N, repeats)
        w = statistics.median(walls)
        y = r.symmetry
        per = f"{y['period_batches']} b" if y["extrapolated"] else "-"
        print(f"{name:<10} {r.batches:>6} {w:>8.3f} {f'({min(walls):.3f}..{max(walls):.3f})':>15} "
              f"{statistics.median(cpus):>7.3f} {GOAL_S:>6.1f} {'yes' if w <= GOAL_S else 'NO':>4}  "
              f"{y['batches_simulated']:>17} {per:>8} {r.iteration_time_s * 1e3:>12.1f} "
              f"{max(r.allreduce_exposed_s) * 1e3:>13.1f}")
    if args.quick:
        return 0
    # what the shortcut saves: the full event simulation (every replica, every batch) where affordable
    print("\nfull event simulation vs the shortcut, 1f1b S=8 M=64 N=24 (same engine, equal results):")
    for P in (2, 4):
        _cold()
        t0 = time.perf_counter()
        full = predict("1f1b", 64, 24, P=P, symmetry=False)
        t_full = time.perf_counter() - t0
        _cold()
        t0 = time.perf_counter()
        short = predict("1f1b", 64, 24, P=P)
        t_short = time.perf_counter() - t0
        same = full.iteration_time_s == short.iteration_time_s and full.utilization == short.utilization
        print(f"  P={P:<3} {P * 8:>5} devices: full {t_full:6.2f} s ({full.symmetry['actions_simulated']:,} actions), "
              f"shortcut {t_short:5.2f} s ({short.symmetry['actions_simulated']:,} actions), equal: {same}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
