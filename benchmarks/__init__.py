"""Benchmarks: speed and memory targets, measured side by side (never timed tests).

Each ``bench_*.py`` times or sizes one thing the project keeps a goal for and prints its
ratios beside the goal; ``python -m benchmarks [--quick]`` runs the explicit list in
``__main__.py``. ``fidelity_scope.py`` sizes ``bench_fidelity``'s campaign from a probe of the
machine. Anything else lives elsewhere: one-off experiments that explained a measured run in
``experiments/``, the RESULTS.md table builders in :mod:`lab.reproduce`, the reliability
checks of the CLI in :mod:`lab.checks`.
"""
