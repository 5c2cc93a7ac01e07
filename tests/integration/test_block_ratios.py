"""experiments/block_ratios.py: per-block ratios to the baseline condition, their median and
range, and results written whole."""

from __future__ import annotations

import json

import pytest

from experiments.block_ratios import print_ratios, ratios_to, save_json


def test_ratios_are_taken_within_each_block_then_summarized() -> None:
    rows = [{"b2b": {"F": 1.0, "B": 2.0}, "wait": {"F": 1.1, "B": 2.0}},
            {"b2b": {"F": 2.0, "B": 4.0}, "wait": {"F": 2.4, "B": 4.4}},  # a slower block
            {"b2b": {"F": 1.0, "B": 2.0}, "wait": {"F": 1.0, "B": 2.2}}]
    r = ratios_to(rows, "b2b", ("F", "B"))
    assert set(r) == {"wait"}
    assert r["wait"]["F"] == pytest.approx({"median": 1.1, "min": 1.0, "max": 1.2})
    assert r["wait"]["B"] == pytest.approx({"median": 1.1, "min": 1.0, "max": 1.1})


def test_print_and_save(tmp_path, capsys) -> None:
    r = {"wait": {"F": {"median": 1.1, "min": 1.0, "max": 1.2}}}
    print_ratios(r, "b2b")
    assert "wait / b2b: F median 1.100 (range 1.000-1.200)" in capsys.readouterr().out
    out = save_json(tmp_path / "new" / "r.json", r)
    assert json.loads(out.read_text()) == r
