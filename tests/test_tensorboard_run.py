"""``run --tensorboard DIR`` and ``validate --tensorboard DIR``: scalars read back with
TensorBoard's own event reader, equal to the numbers the run or validation wrote."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
RUN = ["run", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
       "--eval-windows", "8", "--schedule", "stale", "--stages", "2", "--devices", "cpu:2", "--no-eval"]


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_run_loss_scalars_equal_the_runs_losses(capsys, tmp_path):
    """Two gloo ranks: the loss-stage rank (rank 1) writes one loss per step, equal to the
    run's recorded ``metrics.jsonl`` and ``summary.json`` losses; only it writes."""
    out, tb = tmp_path / "run", tmp_path / "tb"
    rc, _, err = run_cli(capsys, [*RUN, "--iterations", "5", "--out", str(out), "--tensorboard", str(tb)])
    assert rc == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    got = _scalars(tb)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert got["train/loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in rows]
    assert [v for _, v in got["train/loss"]] == pytest.approx(summary["losses"], rel=1e-6)
    assert [s for s, _ in got["train/step_time_s"]] == [1, 2, 3, 4]
    assert all(v > 0 for _, v in got["train/step_time_s"])
    assert len(list(tb.glob("events.out.tfevents.*"))) == 1  # one writer: the loss rank


def test_no_tensorboard_no_writer():
    """A job without the folder gets no writer on any rank; the loss rank is worker 0's last stage."""
    from stalesim.executor.spec import make_job, plan
    from stalesim.executor.tb_live import live_loss
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=2, batch_size=8,
                      iterations=3).check()
    _, sched = plan(cfg)
    job = make_job(cfg)
    assert all(live_loss(job, sched, r, sched.device_actions[r], {}) is None for r in range(2))
