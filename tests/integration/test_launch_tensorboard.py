"""``--tensorboard``: a study's scalars, read back with TensorBoard's own event reader."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_study_writes_scalars_per_step_and_per_run(capsys, tmp_path):
    out, tb = tmp_path / "s", tmp_path / "tb"
    argv = ["study", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
            "--eval-windows", "8", "--iterations", "3", "--quiet", "--seeds", "0", "--jobs", "1",
            "--schedules", "sequential,stale", "--placements", "S2", "--out", str(out), "--tensorboard", str(tb)]
    rc, _, err = run_cli(capsys, argv)
    assert rc == 0, err
    runs = {json.loads(x)["run_id"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    stale = runs["stale_S2_none_seed0"]
    got = _scalars(tb / "stale" / "S2" / "none" / "seed0")
    assert [s for s, _ in got["train/loss"]] == [0, 1, 2]
    assert [v for _, v in got["train/loss"]] == pytest.approx(stale["losses"], rel=1e-6)
    assert [v for _, v in got["train/lr"]] == pytest.approx([stale["lr"]] * 3)
    assert len(got["train/step_time_s"]) == 2 and all(v >= 0 for _, v in got["train/step_time_s"])
    assert got["run/final_loss"] == [(2, pytest.approx(stale["final_loss"], rel=1e-6))]
    assert got["run/final_val_loss"][0][1] == pytest.approx(stale["final_val_loss"], rel=1e-6)
    measured = [v for _, v in got["run/staleness_measured/stage0"] + got["run/staleness_measured/stage1"]]
    assert measured == stale["staleness_measured"] == [2, 0]
    # the baseline is its own TensorBoard run (placement-free: one stage)
    base = _scalars(tb / "sequential" / "S1" / "none" / "seed0")
    assert [v for _, v in base["train/loss"]] == pytest.approx(runs["sequential_S1_none_seed0"]["losses"], rel=1e-6)
    # running the same study again (everything kept) rewrites each run: one curve, not two
    rc, _, _ = run_cli(capsys, argv)
    assert rc == 0 and len(list((tb / "stale" / "S2" / "none" / "seed0").iterdir())) == 1
    assert len(_scalars(tb / "stale" / "S2" / "none" / "seed0")["train/loss"]) == 3
