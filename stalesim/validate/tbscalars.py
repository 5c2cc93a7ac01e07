"""``validate --tensorboard DIR``: each schedule's iteration times for TensorBoard, under
``DIR/<schedule>/`` (TensorBoard's run filter then selects schedules by name).

* ``round/measured_iteration_time_s`` at step k, written when round k finishes (so a long
  validation can be watched round by round);
* at the end, ``round/predicted_iteration_time_s`` at every round's step (one prediction per
  schedule: it uses the stage times of all rounds, so it exists only after the last one;
  drawn flat over the rounds so the two curves share an axis) and ``final/<key>`` for the
  summary row's predicted and measured time and its errors, at the last round's step.

A validation writes through one writer per schedule (one event file per schedule and
validation), opened when the rounds start, flushed after each round (a killed validation
keeps the rounds it finished) and closed at the end. One file per round would not do:
TensorBoard reads a folder's files in the text order of their names, and the names of files
opened in one second differ only by a counter compared as text (``.10`` before ``.9``), so a
round's points could be read before an earlier round's purge and dropped
(:mod:`stalesim.tbevents`).

Each validation's writers purge from step 0 (SummaryWriter's ``purge_step``): a new
validation replaces an earlier one's curves, and a resumed one writes the rounds it read back
from its checkpoint again before its own, so the curves are exactly the last validation's, no
round drawn twice or lost (whether or not the killed one had written its last finished
round). :func:`stalesim.tbevents.open_writer` makes each new file sort after the earlier
ones, which the purge needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.tbevents import open_writer

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: the summary row's numbers written as ``final/<key>`` (stalesim.validate.compare.compare_row)
FINAL_KEYS = ("predicted_iteration_time_s", "measured_iteration_time_s", "time_error", "replay_time_error",
              "utilization_error_points", "speedup_error", "memory_error", "max_loss_rel_diff")

#: the tag of a round's measured iteration time (step: the round)
MEASURED = "round/measured_iteration_time_s"
#: the tag of the prediction, drawn at every round's step
PREDICTED = "round/predicted_iteration_time_s"


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


class ValidationScalars:
    """One validation's TensorBoard writers under ``root``, one per schedule, opened on first
    use; :meth:`close` them at the end of the validation."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._writers: dict[str, SummaryWriter] = {}

    def _writer(self, name: str) -> SummaryWriter:
        if name not in self._writers:
            self._writers[name] = open_writer(self.root / name, purge_step=0)
        return self._writers[name]

    def start(self, runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Open every schedule's writer (hiding an earlier validation's curves) and write the
        rounds already done (``runs``: per schedule, its result in each round, round order;
        a resumed validation's rounds read back from its checkpoint, none for a new one)."""
        for name in runs:
            self._writer(name)
        for k in range(max((len(r) for r in runs.values()), default=0)):
            self.round(k, {name: r[k] for name, r in runs.items() if k < len(r)})
        self.flush()

    def round(self, k: int, runs: Mapping[str, Mapping[str, Any]]) -> None:
        """Round ``k``'s measured iteration time of each schedule (``runs``: its run result per
        schedule; a run that failed has none and writes nothing), flushed."""
        for name, res in runs.items():
            w = self._writer(name)
            if (v := _number(res.get("iteration_time_s"))) is not None:
                w.add_scalar(MEASURED, v, k)
        self.flush()

    def final(self, rows: Iterable[Mapping[str, Any]], rounds: int) -> None:
        """The summary rows (one per schedule): the prediction over the ``rounds`` steps and
        :data:`FINAL_KEYS` at the last round's step, flushed."""
        last = max(int(rounds), 1) - 1
        for row in rows:
            w = self._writer(str(row["schedule"]))
            if (p := _number(row.get("predicted_iteration_time_s"))) is not None:
                for k in range(last + 1):
                    w.add_scalar(PREDICTED, p, k)
            for key in FINAL_KEYS:
                if (v := _number(row.get(key))) is not None:
                    w.add_scalar(f"final/{key}", v, last)
        self.flush()

    def flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
