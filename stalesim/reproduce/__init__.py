"""Reproduction tooling: RESULTS.md tables generated from stored artifacts, and the GPU run.

* :mod:`stalesim.reproduce.stats`: paired differences with a Student-t confidence interval.
* :mod:`stalesim.reproduce.store`: copy a study's small artifacts into ``docs/results``.
* :mod:`stalesim.reproduce.tables`: every table of ``docs/RESULTS.md`` rendered from the stored
  artifacts (CSV/JSONL + config); ``--check`` is what the test suite runs.
* :mod:`stalesim.reproduce.lm_staleness`: the char-GPT staleness table from its stored study tables.
* :mod:`stalesim.reproduce.schedules`: every schedule predicted on a catalog GPU pair
  (``python -m stalesim.reproduce schedules``: the profile and sweep commands, their CSVs, the table).
* :mod:`stalesim.reproduce.gpu`: ``make reproduce-gpu``, the paper's CIFAR-10 experiments end to
  end on one GPU (and the 2-GPU table when two are visible), resumable.
"""
