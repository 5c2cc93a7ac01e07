"""Run the maintained benchmarks (``make bench`` / ``python -m benchmarks [--quick] [NAME ...]``).

The list is explicit (:data:`BENCHMARKS`), not every module found: a module joins it when it
measures a target the project keeps (its goal printed beside the measurement), has a
``main(argv)`` that runs with no argument, and takes ``--quick``. ``--quick`` runs each at its
smallest sizes and fewest repeats, a couple of minutes in all on 2 cores: it shows that every
benchmark still runs, its numbers are not evidence for the goals. Names (``sim scale``) run a
subset. One benchmark that fails does not stop the others; the exit status is 1 when any
failed, and the closing table says which.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One entry of the list: ``benchmarks.bench_<name>``'s ``main`` with the arguments of
    each mode."""

    name: str
    what: str
    quick: tuple[str, ...] = ("--quick",)
    full: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return f"benchmarks.bench_{self.name}"

    def argv(self, quick: bool) -> list[str]:
        return list(self.quick if quick else self.full)


# Cheapest first, so that ``--quick`` reports the simulator's numbers within seconds.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("sim", "simulator: event-path actions/s, fast vs event path, a sweep (goal per 1,000 configurations)"),
    Benchmark("scale", "cluster-scale prediction: 4,096 devices in <= 1 s on one core"),
    Benchmark("rotation", "basis rotation's update cost, measured vs what the simulator adds"),
    Benchmark("overhead", "executor overhead per component: dispatch loop, stage runtime, messages"),
    Benchmark("emulator", "emulator wall time and memory of stale / pipedream S=4 vs sequential"),
    Benchmark("batched", "batched emulation: K runs at once vs a loop of K single runs"),
    Benchmark("lm", "char-GPT training step, and the emulator's cost on it"),
    Benchmark("heap", "the ranks' heap policy: glibc's default vs the kept heap"),
    Benchmark("executor", "executor speed-up on 2 ranks, and gpipe/1f1b vs torch.distributed.pipelining"),
    Benchmark("pipelining", "interleaved / zero-bubble schedules vs torch.distributed.pipelining"),
    # The whole campaign takes hours: the full run of this list runs it end to end at its
    # smallest sizes, the quick run prints its plan and estimate only; its evidence for the
    # goals is ``python -m benchmarks.bench_fidelity`` on a quiet machine.
    Benchmark("fidelity", "fidelity campaign: simulator vs executor, every goal (plan only when quick)",
              quick=("--quick", "--estimate"), full=("--quick",)),
    Benchmark("inject", "StalePipeline: a user's char-GPT loop wrapped vs plain (goal <= 1.10x per step)"),
    Benchmark("llm_peer", "LLM-scale predictions beside a peer tool's on published runs (skips without it)"),
)


def by_name(names: list[str]) -> list[Benchmark]:
    """The entries named (``sim`` or ``bench_sim``), in the list's order; every entry when none."""
    known = {b.name: b for b in BENCHMARKS}
    wanted = {n.removeprefix("bench_") for n in names}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [b for b in BENCHMARKS if not wanted or b.name in wanted]


def run_one(bench: Benchmark, quick: bool) -> str | None:
    """Run one benchmark's ``main``; ``None`` when it finished, else why it failed (its
    traceback is printed: a benchmark that raises is a broken benchmark)."""
    try:
        rc = importlib.import_module(bench.module).main(bench.argv(quick))
    except SystemExit as exc:  # argparse, or a benchmark that ends itself
        rc = exc.code
    except Exception as exc:  # report it and go on with the next benchmark
        traceback.print_exc()
        return f"{type(exc).__name__}: {exc}"
    if rc not in (None, 0):
        return f"exit status {rc}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smallest sizes, fewest repeats (a couple of minutes)")
    p.add_argument("--list", action="store_true", help="print the list and run nothing")
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = p.parse_args(argv)
    try:
        chosen = by_name(args.names)
    except ValueError as exc:
        p.error(str(exc))
    if args.list:
        for b in chosen:
            print(f"{b.name:<11} {b.what}")
        return 0
    results: list[tuple[str, float, str | None]] = []
    t_all = time.perf_counter()
    for b in chosen:
        print(f"== {b.name}: python -m {b.module} {' '.join(b.argv(args.quick))} ==", flush=True)
        t0 = time.perf_counter()
        failed = run_one(b, args.quick)
        results.append((b.name, time.perf_counter() - t0, failed))
        print(f"== {b.name}: {results[-1][1]:.1f} s{'' if failed is None else ', FAILED: ' + failed} ==\n",
              flush=True)
    print(f"{'benchmark':<11} {'seconds':>8}  result")
    for name, dt, failed in results:
        print(f"{name:<11} {dt:>8.1f}  {'ok' if failed is None else 'FAILED: ' + failed}")
    print(f"{'total':<11} {time.perf_counter() - t_all:>8.1f}")
    return 1 if any(f is not None for _, _, f in results) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
