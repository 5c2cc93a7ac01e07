"""Run every benchmark module (``make bench`` / ``python -m benchmarks``).

Each ``benchmarks/bench_*.py`` has a ``main()`` that prints its own table of
measured ratios. Pass module names to run a subset: ``python -m benchmarks sim``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import benchmarks


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    if argv:
        names = [n for n in names if n.removeprefix("bench_") in argv or n in argv]
    for name in names:
        print(f"== {name} ==", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").main()
        print(f"== {name}: {time.perf_counter() - t0:.1f} s ==\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
