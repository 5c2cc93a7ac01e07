"""TensorBoard scalars of a study's runs, through ``torch.utils.tensorboard``.

Each finished run gets its own TensorBoard run folder, ``<dir>/<schedule>/S<stages>/
<mitigation>/seed<seed>``, so TensorBoard's run filter (a regular expression on that
path) selects by schedule, depth, mitigation or seed, and curves of one tag overlay
across runs. What is written comes from the run's own ``metrics.jsonl`` (the same
numbers the run folder keeps, so a run placed by any launcher gives the same curves):

* per step ``train/loss``, ``train/lr`` and ``train/step_time_s`` (wall time between
  the step's end and the previous one's: with ``--jobs`` > 1 runs share the CPU);
* per epoch every number the epoch record holds (``epoch/train_accuracy``,
  ``epoch/test_accuracy`` or ``epoch/val_loss``...), at the epoch's last step;
* per run ``run/final_loss``, ``run/final_test_accuracy`` or ``run/final_val_loss``,
  ``run/staleness_measured/stage<k>`` (the versions the run measured) and
  ``run/wall_time_s``, at its last step.

A study's scalars are written when a run finishes (the study's process reads the folder
a job wrote, so this works the same whichever machine ran it); a study's run folder is
rewritten each time (a resumed study rewrites the runs it keeps): never two copies of a
curve. ``emulate --tensorboard DIR`` writes the same scalars live, while the run trains
(:class:`RunScalars`, flushed at each read of the losses), into ``DIR`` itself; ``run
--tensorboard DIR`` writes the per-step loss and step time through it from the loss-stage
rank (:mod:`stalesim.executor.tb_live`).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError

#: the per-run summary numbers written as ``run/<key>``
RUN_KEYS = ("final_loss", "final_test_accuracy", "final_val_loss", "final_val_bpc", "wall_time_s",
            "throughput_samples_per_s")


def check_available() -> None:
    """A one-line error naming the extra when TensorBoard is not installed (before any run)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise StalesimError("tensorboard: --tensorboard needs tensorboard: pip install stalesim[tensorboard]") from None


def run_name(summary: dict[str, Any], mitigation: str) -> str:
    """The TensorBoard run of a summary: schedule/S<stages>/mitigation/seed<seed>."""
    return f"{summary['schedule']}/S{summary['stages']}/{mitigation}/seed{summary['seed']}"


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


class RunScalars:
    """One run's TensorBoard scalars in ``folder``, written record by record: live as a run
    trains (``emulate --tensorboard``: the tally hands each ``metrics.jsonl`` record over
    and :meth:`flush` writes them out at each read of the losses), or afterwards from the
    run's ``metrics.jsonl`` (:func:`write_run`). The same mapping either way, so live and
    after-the-fact curves are equal.

    ``last_step``: the run's last step (an epoch record is drawn at its epoch's last step,
    at most this). ``purge_step``: a resumed run's first new step: TensorBoard hides the
    events an earlier attempt wrote from that step on (SummaryWriter's ``purge_step``),
    so a resumed curve is not drawn twice."""

    def __init__(self, folder: Path, *, batches_per_epoch: int, last_step: int,
                 purge_step: int | None = None) -> None:
        from stalesim.tbevents import open_writer

        self.folder = folder
        self.bpe, self.last = max(int(batches_per_epoch), 1), max(int(last_step), 0)
        # a resumed run's file must sort after the earlier attempt's (stalesim.tbevents)
        self.writer: Any = open_writer(folder, purge_step=purge_step)
        self._prev: float | None = None

    def record(self, rec: dict[str, Any]) -> None:
        """One ``metrics.jsonl`` record: a step's loss, lr and step time, or an epoch's numbers."""
        w = self.writer
        if "step" in rec:
            step = int(rec["step"])
            for key in ("loss", "lr"):
                if (v := _number(rec.get(key))) is not None:
                    w.add_scalar(f"train/{key}", v, step)
            now = _number(rec.get("wall_time_s"))
            if now is not None and self._prev is not None:
                w.add_scalar("train/step_time_s", now - self._prev, step)
            self._prev = now if now is not None else self._prev
        elif "epoch" in rec:
            step = min((int(rec["epoch"]) + 1) * self.bpe - 1, self.last)
            for key, val in rec.items():
                if key not in ("epoch", "wall_time_s") and (v := _number(val)) is not None:
                    w.add_scalar(f"epoch/{key}", v, step)

    def summary(self, summary: dict[str, Any]) -> None:
        """The run's own numbers (:data:`RUN_KEYS`, measured staleness per stage) at its last step."""
        last = max(int(summary.get("steps_done") or 0) - 1, 0)
        for key in RUN_KEYS:
            if (v := _number(summary.get(key))) is not None:
                self.writer.add_scalar(f"run/{key}", v, last)
        for k, s in enumerate(summary.get("staleness_measured") or []):
            if (v := _number(s)) is not None:
                self.writer.add_scalar(f"run/staleness_measured/stage{k}", v, last)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def write_run(root: Path, summary: dict[str, Any], mitigation: str = "none") -> Path:
    """Write one finished run's scalars under ``root``; the run's TensorBoard folder."""
    folder = root / run_name(summary, mitigation)
    if folder.exists():
        shutil.rmtree(folder)
    last = max(int(summary.get("steps_done") or 0) - 1, 0)
    run = RunScalars(folder, batches_per_epoch=int(summary.get("batches_per_epoch") or 1), last_step=last)
    try:
        for rec in _records(Path(summary["run_dir"])):
            run.record(rec)
        run.summary(summary)
    finally:
        run.close()
    return folder
