"""A study re-run into the same folder keeps its finished runs (same config) and runs the rest."""

from __future__ import annotations

import json
from dataclasses import replace

from stalesim.emulator.study import expand, finished_runs, run_study
from stalesim.runtime.config import TrainConfig


def _points(seeds):
    base = TrainConfig(model="lenet5", dataset="synthetic", iterations=2, batch_size=8, synthetic_size=16)
    return expand(base, ["sequential"], [], ["none"], seeds)


def test_resume_skips_finished_runs_with_same_config(tmp_path):
    first = run_study(_points([0]), tmp_path, jobs=1, progress=False)
    assert [r["run_id"] for r in first] == ["sequential_S1_none_seed0"]
    line0 = (tmp_path / "results.jsonl").read_text().splitlines()[0]
    both = run_study(_points([0, 1]), tmp_path, jobs=1, progress=False)
    assert [r["run_id"] for r in both] == ["sequential_S1_none_seed0", "sequential_S1_none_seed1"]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and lines[0] == line0  # seed 0 kept as it was, not re-run
    # another config under the same run id is not reused
    (rid, cfg), = _points([0])
    pts = {rid: json.loads(json.dumps(replace(cfg, lr=0.5).to_dict()))}
    assert finished_runs(tmp_path, pts) == []
    pts = {rid: json.loads(json.dumps(cfg.to_dict()))}
    assert [r["run_id"] for r in finished_runs(tmp_path, pts)] == [rid]


def test_resume_ignores_garbage_lines(tmp_path):
    (tmp_path / "results.jsonl").write_text("not json\n[1, 2]\n")
    assert finished_runs(tmp_path, {"x": {}}) == []
