"""docs/RESULTS.md's char-GPT staleness table equals the stored study artifacts."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from lab.reproduce.__main__ import main
from lab.reproduce.lm_staleness import DEFAULT, table

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / DEFAULT


def test_results_table_equals_the_stored_study_tables() -> None:
    rebuilt = table(STUDY)
    assert rebuilt == (STUDY / "table.md").read_text()
    assert rebuilt in (ROOT / "docs" / "RESULTS.md").read_text()


def test_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m lab.reproduce lm-staleness DIR` (the command RESULTS.md cites)."""
    assert main(["lm-staleness", str(STUDY)]) == 0
    assert capsys.readouterr().out == (STUDY / "table.md").read_text()


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_study_tables_aggregate_the_per_seed_results(opt: str) -> None:
    d = STUDY / opt
    study = json.loads((d / "study.json").read_text())
    runs = [json.loads(x) for x in (d / "results_per_seed.jsonl").read_text().splitlines()]
    assert [r["run_id"] for r in runs] == study["runs"] and study["batched"] is True
    assert study["base"]["optimizer"] == opt and study["seeds"] == [0, 1, 2]
    with open(d / "table.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {int(r["stages"]) for r in rows} == {1, 2, 4, 8}
    for row in rows:
        mine = [r for r in runs if r["schedule"] == row["schedule"] and r["stages"] == int(row["stages"])
                and r["mitigation"] == row["mitigation"]]
        assert len(mine) == int(row["seeds"]) == 3
        assert sum(r["diverged"] for r in mine) == int(row["diverged"])
        vals = [r["final_val_loss"] for r in mine if r["final_val_loss"] is not None]
        if vals:
            assert float(row["val_loss_mean"]) == pytest.approx(statistics.fmean(vals), rel=1e-12)
        else:
            assert row["val_loss_mean"] == ""
