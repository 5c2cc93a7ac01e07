"""Benchmarks: speed and memory targets, measured side by side (never timed tests).

Each ``bench_*.py`` times or sizes one thing and prints its ratios (``python -m benchmarks``
runs them all); ``fidelity_scope.py`` sizes ``bench_fidelity``'s campaign from a probe of the
machine. Anything else lives elsewhere: the RESULTS.md table builders in
:mod:`stalesim.reproduce`, the reliability checks of the CLI in :mod:`stalesim.checks`.
"""
