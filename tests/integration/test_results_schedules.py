"""docs/RESULTS.md's predicted schedule tables equal the ones rebuilt from their stored sweeps,
and the stored sweeps equal a re-run with the current code (seconds: event simulations of a
roofline profile), so a change to the simulator's memory or time model cannot leave them stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.reproduce.__main__ import main
from lab.reproduce.schedules import best_configs, rows_on, table
from stalesim.figures.common import SHAPE_PROFILES

ROOT = Path(__file__).resolve().parents[2]
CASES = [("schedules_resnet56_h100", (16, 256)), ("schedules_gptchar_h100", (4, 64))]
SHAPES = {"schedules_resnet56_h100": "resnet56_b8_shape.json", "schedules_gptchar_h100": "gpt-char_b8_shape.json"}


@pytest.mark.parametrize(("folder", "micros"), CASES)
def test_stored_sweeps_equal_a_rerun(folder: str, micros: tuple[int, ...], tmp_path: Path, capsys) -> None:
    """Re-run the folder's commands (python -m lab.reproduce schedules) and compare every sweep row
    and the table with what is stored: a stale artifact fails here, naming the first difference."""
    shape = SHAPE_PROFILES / SHAPES[folder]
    argv = ["schedules", "--shape", str(shape), "--micro", ",".join(map(str, micros)), "--out", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    d = ROOT / "docs" / "results" / folder
    for m in micros:
        fresh = (tmp_path / f"mb{m}.csv").read_text().splitlines()
        stored = (d / f"mb{m}.csv").read_text().splitlines()
        diff = [(a, b) for a, b in zip(stored, fresh) if a != b]
        assert len(fresh) == len(stored) and not diff, f"mb{m}.csv: stored vs re-run {diff[:1]}"
    assert (tmp_path / "table.md").read_text() == (d / "table.md").read_text()


@pytest.mark.parametrize(("folder", "micros"), CASES)
def test_results_table_equals_the_stored_sweeps(folder: str, micros: tuple[int, ...]) -> None:
    d = ROOT / "docs" / "results" / folder
    per_micro = {m: rows_on(d / f"mb{m}.csv", 2) for m in micros}
    rebuilt = table(per_micro, 8)
    assert rebuilt == (d / "table.md").read_text()
    assert rebuilt in (ROOT / "docs" / "RESULTS.md").read_text()
    # every schedule of the sweep has a two-device row, and the rows are fastest first
    keys = best_configs(per_micro[micros[0]])
    assert len({k[0] for k in keys}) == 15
    times = [float(per_micro[micros[0]][k]["iteration_time_s"]) for k in keys]
    assert times == sorted(times)


def test_commands_are_recorded() -> None:
    for folder, micros in CASES:
        cmds = (ROOT / "docs" / "results" / folder / "commands.txt").read_text().splitlines()
        assert len(cmds) == 2 * len(micros)
        assert all(c.startswith("stalesim ") for c in cmds)
