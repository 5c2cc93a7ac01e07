"""The repository's own tooling, kept out of the installed ``stalesim`` package: RESULTS.md's
tables and the GPU reproduction (:mod:`lab.reproduce`, ``make tables``), the GPU campaign
(:mod:`lab.gpucheck`, ``make gpu-check``) and the CLI's reliability checks in fresh processes
(:mod:`lab.checks`: the bad-input probe, the ``stalesim run`` soak).

Run from the repository root (``python -m lab.gpucheck``): the folder is not installed, so
it is importable where the repository is the working directory or on ``PYTHONPATH``. It may
import any part of ``stalesim``; nothing in ``stalesim`` imports it.
"""
