"""``emulate --tensorboard DIR``: the run's scalars, written while it trains (flushed at each
read of the losses), read back with TensorBoard's own event reader and equal to the run's
``metrics.jsonl``; a resumed run's curve is not drawn twice."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from stalesim.emulator.replay import Emulator  # noqa: E402
from stalesim.launch.tb_scalars import RunScalars  # noqa: E402
from stalesim.runtime.config import TrainConfig  # noqa: E402

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
ARGS = ["--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
        "--eval-windows", "8", "--schedule", "stale", "--stages", "2", "--quiet"]


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_emulate_scalars_equal_the_runs_jsonl(capsys, tmp_path):
    out, tb = tmp_path / "run", tmp_path / "tb"
    rc, _, err = run_cli(capsys, ["emulate", *ARGS, "--epochs", "2", "--out", str(out), "--tensorboard", str(tb)])
    assert rc == 0, err
    recs = _records(out)
    steps = [r for r in recs if "step" in r]
    epochs = [r for r in recs if "step" not in r]
    summary = json.loads((out / "summary.json").read_text())
    got = _scalars(tb)
    assert len(steps) == 8 and len(epochs) == 2  # 4 batches an epoch
    assert got["train/loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps]
    assert [v for _, v in got["train/lr"]] == pytest.approx([r["lr"] for r in steps])
    times = [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(steps, steps[1:])]
    assert [v for _, v in got["train/step_time_s"]] == pytest.approx(times, abs=1e-6)
    # an epoch's numbers at its last step: training accuracy, validation loss and bpc
    for key in ("train_accuracy", "val_loss", "val_bpc"):
        assert got[f"epoch/{key}"] == [(4 * e["epoch"] + 3, pytest.approx(e[key], rel=1e-6)) for e in epochs]
    assert got["run/final_loss"] == [(7, pytest.approx(summary["final_loss"], rel=1e-6))]
    assert [v for _, v in got["run/staleness_measured/stage0"] + got["run/staleness_measured/stage1"]] == \
        summary["staleness_measured"] == [2, 0]


def test_scalars_are_flushed_while_the_run_trains(tmp_path, monkeypatch):
    """Each read of the losses (every 2 batches here) flushes: the event file read back at
    that moment already holds the steps read so far, before the run ends."""
    seen: list[int] = []
    flush = RunScalars.flush

    def counting(self):
        flush(self)
        seen.append(len(_scalars(self.folder).get("train/loss", [])))

    monkeypatch.setattr(RunScalars, "flush", counting)
    cfg = TrainConfig(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8, eval_windows=8,
                      schedule="stale", stages=2, iterations=6).check()
    summary = Emulator(cfg, tensorboard=tmp_path / "tb", read_every=2, progress=False).run()
    assert seen[:3] == [2, 4, 6]  # live: two more steps at each read, the first after step 1
    got = _scalars(tmp_path / "tb")
    assert [v for _, v in got["train/loss"]] == pytest.approx(summary["losses"], rel=1e-6)


def test_a_resumed_run_draws_each_step_once(capsys, tmp_path, monkeypatch):
    """A run stopped after step 4 (its last checkpoint after step 3) and resumed: the steps the
    first attempt logged past the checkpoint are hidden (purge_step), each step is drawn once."""
    from stalesim.emulator.tally import Tally

    out, tb = tmp_path / "run", tmp_path / "tb"
    cfg = TrainConfig(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8, eval_windows=8,
                      schedule="stale", stages=2, iterations=8).check()
    complete = Tally._complete_batch

    def stop_at_5(self, t, now):
        if t == 5:
            raise KeyboardInterrupt  # as a user's ^C after step 4 was logged
        complete(self, t, now)

    with monkeypatch.context() as m:
        m.setattr(Tally, "_complete_batch", stop_at_5)
        with pytest.raises(KeyboardInterrupt):
            Emulator(cfg, out=out, tensorboard=tb, checkpoint_every=2, read_every=1, progress=False).run()
    assert [s for s, _ in _scalars(tb)["train/loss"]] == [0, 1, 2, 3, 4]  # step 4: past the checkpoint
    rc, _, err = run_cli(capsys, ["emulate", *ARGS, "--iterations", "8", "--checkpoint-every", "2", "--resume",
                                  "--out", str(out), "--tensorboard", str(tb)])
    assert rc == 0, err
    steps = [r for r in _records(out) if "step" in r]
    got = _scalars(tb)["train/loss"]
    assert [s for s, _ in got] == [r["step"] for r in steps] == list(range(8))
    assert [v for _, v in got] == pytest.approx([r["loss"] for r in steps], rel=1e-6)
