"""`run_study` / `stalesim study --batched`: grouping into batches, batched == unbatched
results, resume of finished runs, the LM table, and one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

from stalesim.emulator.study import expand, group_batches, run_study
from stalesim.runtime.config import TrainConfig

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _base(**kw) -> TrainConfig:
    d = dict(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8, optimizer="adamw",  # noqa: C408
             lr=3e-3, weight_decay=0.1, eval_windows=8, iterations=4, microbatches=2, dtype="float64",
             schedule="2bw", stages=2)
    d.update(kw)
    return TrainConfig(**d).check()


def test_group_batches_by_schedule_and_partition():
    points = expand(_base(), ["sequential", "stale", "2bw"], [2, 3], ["none", "error-feedback"], [0, 1])
    groups = group_batches(points)
    names = [bid for bid, _ in groups]
    assert names == ["b00_sequential_S1", "b01_stale_S2", "b02_stale_S3", "b03_2bw_S2", "b04_2bw_S3"]
    sizes = [len(m) for _, m in groups]
    assert sizes == [2, 4, 4, 4, 4] and sum(sizes) == len(points)
    for _, members in groups:
        assert len({(c.schedule, c.num_stages, c.microbatches) for _, c in members}) == 1
    # micro-batches only for the micro-batch schedule
    assert {c.microbatches for _, m in groups[:3] for _, c in m} == {1}
    small = group_batches(points, batch_runs=3)
    assert [len(m) for _, m in small] == [2, 3, 1, 3, 1, 3, 1, 3, 1]


def test_batched_study_equals_unbatched_and_resumes(tmp_path):
    points = expand(_base(), ["2bw"], [2], ["none", "nesterov-lookahead"], [0, 1])
    mit = {rid: rid.split("_")[2] for rid, _ in points}
    one = run_study(points, tmp_path / "single", jobs=1, progress=False, mitigation_of=mit)
    many = run_study(points, tmp_path / "batched", jobs=1, progress=False, mitigation_of=mit, batched=True)
    assert [r["run_id"] for r in one] == [r["run_id"] for r in many] == [rid for rid, _ in points]
    for a, b in zip(one, many):
        assert b["batched"] == 4 and a["batched"] is None  # every summary has the key (docs/summary.md)
        assert b["losses"] == pytest.approx(a["losses"], rel=1e-10)
        assert b["final_val_loss"] == pytest.approx(a["final_val_loss"], rel=1e-10)
    assert (tmp_path / "batched" / "batches" / "b00_2bw_S2" / "batch.json").is_file()
    # resume: finished runs are kept as they are (no batch is rebuilt)
    again = run_study(points, tmp_path / "batched", jobs=1, progress=False, mitigation_of=mit, batched=True,
                      resume=True)
    assert [r["losses"] for r in again] == [r["losses"] for r in many]
    lines = (tmp_path / "batched" / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(points)


SYN = ["study", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
       "--eval-windows", "8", "--iterations", "3", "--quiet", "--seeds", "0,1", "--jobs", "1"]


def test_cli_batched_study_writes_the_lm_table(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, SYN + ["--optimizer", "adamw", "--lr", "3e-3", "--schedules", "sequential,2bw",
                                     "--placements", "S2", "-M", "2", "--mitigations", "none,error-feedback",
                                     "--batched", "--out", str(tmp_path), "--json"])
    assert rc == 0
    rows = json.loads(out)
    assert {(r["schedule"], r["mitigation"]) for r in rows} == {
        ("sequential", "none"), ("2bw", "none"), ("2bw", "error-feedback")}
    assert all(r["seeds"] == 2 and r["val_loss_mean"] > 0 for r in rows)
    assert "validation loss (nats/char)" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "val_loss_vs_staleness.png").is_file()
    study = json.loads((tmp_path / "study.json").read_text())
    assert study["batched"] is True and len(study["runs"]) == 6


@pytest.mark.parametrize("argv,needle", [
    (["--optimizer", "lion"], "lion"),
    (["--optimizer", "sgd", "--momentum", "0", "--mitigations", "weight-prediction"], "weight_prediction"),
    (["--optimizer", "sgd", "--momentum", "0", "--mitigations", "nesterov-lookahead"], "nesterov_lookahead"),
    (["--mitigations", "teleport"], "teleport"),
    (["--batch-runs", "2"], "needs --batched"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, tmp_path, argv, needle):
    rc, out, err = run_cli(capsys, SYN + ["--schedules", "stale", "--placements", "S2", "--out", str(tmp_path)] + argv)
    assert rc == 2 and needle in err
    assert len(err.strip().splitlines()) == 1 or err.lstrip().startswith("usage:")


def test_cli_batch_that_does_not_fit_is_exit_2(capsys, tmp_path, monkeypatch):
    import stalesim.runtime.batched.memory as rb

    monkeypatch.setattr(rb, "available_bytes", lambda device: 1024)
    rc, _, err = run_cli(capsys, SYN + ["--schedules", "stale", "--placements", "S2", "--batched",
                                     "--out", str(tmp_path)])
    assert rc == 2
    assert err.startswith("stalesim: error: batched: 2 runs need about") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_study_extended_with_more_seeds_resumes_into_a_fresh_batch(tmp_path):
    """Batch folders are named by grid position: the new seeds' batch gets the finished batch's
    folder, whose checkpoint is not theirs; they train from step 0 and the old runs are kept."""
    first = expand(_base(), ["2bw"], [2], ["none"], [0, 1])
    done = run_study(first, tmp_path, jobs=1, progress=False, batched=True, checkpoint_every=2)
    assert (tmp_path / "batches" / "b00_2bw_S2" / "checkpoint.pt").is_file()
    more = expand(_base(), ["2bw"], [2], ["none"], [0, 1, 2, 3])
    again = run_study(more, tmp_path, jobs=1, progress=False, batched=True, checkpoint_every=2, resume=True,
                      continue_runs=True)
    assert [r["run_id"] for r in again] == [rid for rid, _ in more]
    assert [r["losses"] for r in again[:2]] == [r["losses"] for r in done]
    alone = run_study(expand(_base(), ["2bw"], [2], ["none"], [2, 3]), tmp_path / "alone", jobs=1,
                      progress=False, batched=True)
    for a, b in zip(again[2:], alone):
        assert a["losses"] == pytest.approx(b["losses"], rel=1e-10)
