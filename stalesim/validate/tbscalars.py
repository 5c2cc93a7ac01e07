"""``validate --tensorboard DIR``: each schedule's iteration times for TensorBoard, under
``DIR/<schedule>/`` (TensorBoard's run filter then selects schedules by name).

* ``round/measured_iteration_time_s`` at step k, written when round k finishes (so a long
  validation can be watched round by round);
* at the end, ``round/predicted_iteration_time_s`` at every round's step (one prediction per
  schedule: it uses the stage times of all rounds, so it exists only after the last one;
  drawn flat over the rounds so the two curves share an axis) and ``final/<key>`` for the
  summary row's predicted and measured time and its errors, at the last round's step.

Round k's writer purges what an earlier validation wrote in the folder from step k on
(SummaryWriter's ``purge_step``): a new validation (round 0) replaces the old curves, a
resumed one continues them without drawing a round twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: the summary row's numbers written as ``final/<key>`` (stalesim.validate.compare.compare_row)
FINAL_KEYS = ("predicted_iteration_time_s", "measured_iteration_time_s", "time_error", "replay_time_error",
              "utilization_error_points", "speedup_error", "memory_error", "max_loss_rel_diff")


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _writer(folder: Path, purge_step: int | None = None) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(folder), purge_step=purge_step)


def write_round(root: Path, k: int, runs: Mapping[str, Mapping[str, Any]]) -> None:
    """Round ``k``'s measured iteration time of each schedule (``runs``: its run result per
    schedule; a run that failed has none and writes nothing)."""
    for name, res in runs.items():
        w = _writer(root / name, purge_step=k)
        try:
            if (v := _number(res.get("iteration_time_s"))) is not None:
                w.add_scalar("round/measured_iteration_time_s", v, k)
        finally:
            w.close()


def write_final(root: Path, rows: Iterable[Mapping[str, Any]], rounds: int) -> None:
    """The summary rows (one per schedule): the prediction over the ``rounds`` steps and
    :data:`FINAL_KEYS` at the last round's step."""
    last = max(int(rounds), 1) - 1
    for row in rows:
        w = _writer(root / str(row["schedule"]))
        try:
            if (p := _number(row.get("predicted_iteration_time_s"))) is not None:
                for k in range(last + 1):
                    w.add_scalar("round/predicted_iteration_time_s", p, k)
            for key in FINAL_KEYS:
                if (v := _number(row.get(key))) is not None:
                    w.add_scalar(f"final/{key}", v, last)
        finally:
            w.close()
