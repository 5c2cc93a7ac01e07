"""Reproduction tooling: RESULTS.md tables generated from stored artifacts, and the GPU run.

Repository tooling, not part of the installed package: every path it reads and writes
(``docs/RESULTS.md``, ``docs/results/``, ``figures/``) is relative to the repository root, so
it runs from there (``python -m lab.reproduce``, ``make tables``).

* :mod:`lab.reproduce.stats`: paired differences with a Student-t confidence interval.
* :mod:`lab.reproduce.store`: copy a study's small artifacts into ``docs/results``.
* :mod:`lab.reproduce.tables`: every table of ``docs/RESULTS.md`` rendered from the stored
  artifacts (CSV/JSONL + config); ``--check`` is what the test suite runs.
* :mod:`lab.reproduce.lm_staleness`: the char-GPT staleness table from its stored study tables.
* :mod:`lab.reproduce.schedules`: every schedule predicted on a catalog GPU pair
  (``python -m lab.reproduce schedules``: the profile and sweep commands, their CSVs, the table).
* :mod:`lab.reproduce.gpu`: ``make reproduce-gpu``, the paper's CIFAR-10 experiments end to
  end on one GPU (and the 2-GPU table when two are visible), resumable.
"""
