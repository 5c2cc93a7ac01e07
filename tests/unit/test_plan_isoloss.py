"""Iso-loss overhead on constructed plan rows with known iteration counts: the ratio, the
reference it names (sequential first, then the flushed schedule), and its place in the
terminal table, plan.json, plan.csv and the figure."""

from __future__ import annotations

import csv
import json

import pytest

from stalesim.plan.candidates import Candidate
from stalesim.plan.compose import compose
from stalesim.plan.convergence import Convergence, Interval
from stalesim.plan.isoloss import iso_loss, references
from stalesim.plan.timing import Timing

HEADER = {"model": "m", "dataset": "d", "target": "loss <= 1", "devices": 2, "hardware": "h",
          "capacity": "unknown", "capacity_bytes": None, "time_error": 0.0, "seeds": [0], "batch_size": 64}


def _t(it: float) -> Timing:
    return Timing(first_batches=0, first_s=0.0, steady_s=it, overhead_s=0.0, peak_memory_bytes=(100, 100))


def _conv(mean: float) -> Convergence:
    return Convergence([int(mean)], 1000, "reached", Interval(mean, mean, mean, 1))


def _rows(with_sequential: bool = True, optimizer: str = "sgd"):
    seq = Candidate("sequential", devices=1, stages=1, optimizer=optimizer)
    gp = Candidate("gpipe", devices=2, stages=2, microbatches=4, optimizer=optimizer)
    stale = Candidate("stale", devices=2, stages=2, optimizer=optimizer)
    pd = Candidate("pipedream", devices=2, stages=2, optimizer=optimizer)
    cands = ([seq] if with_sequential else []) + [gp, stale, pd]
    # synchronous 100 iterations (the flushed run 101: float sums in another order), stale 130, pipedream 115
    convs = {seq: _conv(100), gp: _conv(101), stale: _conv(130), pd: _conv(115)}
    t = {seq: _t(0.4), gp: _t(0.3), stale: _t(0.2), pd: _t(0.25)}
    return compose(cands, {c: convs[c] for c in cands}, {c: t[c] for c in cands}, time_error=0.0,
                   capacity_bytes=None)


def test_overhead_is_iterations_over_the_sequential_run() -> None:
    isos = iso_loss(_rows(), 64)
    assert set(isos) == {"stale S=2 sgd", "pipedream S=2 sgd"}  # synchronous rows have none
    s = isos["stale S=2 sgd"]
    assert s.overhead == pytest.approx(1.30)
    assert (s.reference, s.reference_kind) == ("sequential S=1 (1 device) sgd", "sequential")
    assert s.samples_to_target == 130 * 64 and s.reference_samples == 100 * 64
    assert isos["pipedream S=2 sgd"].overhead == pytest.approx(1.15)


def test_without_sequential_the_flushed_schedule_is_the_reference() -> None:
    isos = iso_loss(_rows(with_sequential=False), 64)
    s = isos["stale S=2 sgd"]
    assert s.reference == "gpipe S=2 M=4 sgd" and s.reference_kind == "flushed"
    assert s.overhead == pytest.approx(130 / 101)


def test_reference_is_per_optimizer_and_must_have_reached() -> None:
    rows = _rows() + _rows(with_sequential=False, optimizer="adamw")
    refs = references(rows)
    assert refs["sgd"].candidate.schedule == "sequential"
    assert refs["adamw"].candidate.schedule == "gpipe"
    for r in rows:  # no synchronous run reached: no overhead at all
        if r.candidate.synchronous:
            r.convergence = Convergence([None], 1000, "not reached")
    assert iso_loss(rows, 64) == {}


def test_table_json_csv_and_figure_carry_it(tmp_path) -> None:
    from stalesim.plan.report import table, write_outputs

    rows = _rows()
    text = table(rows, HEADER)
    assert "iso-loss" in text.splitlines()[2]
    stale_line = next(ln for ln in text.splitlines() if "stale S=2 sgd" in ln)
    assert " 1.30x " in stale_line
    assert ("iso-loss = iterations (= samples) to target over the synchronous schedule's: "
            "sequential S=1 (1 device) sgd (sequential)") in text
    write_outputs(tmp_path, rows, HEADER, figure=True)
    doc = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    by = {d["label"]: d for d in doc["rows"]}
    assert by["stale S=2 sgd"]["iso_loss_overhead"] == pytest.approx(1.3)
    assert by["stale S=2 sgd"]["iso_loss_reference_kind"] == "sequential"
    assert by["pipedream S=2 sgd"]["samples_to_target"] == 115 * 64
    assert by["gpipe S=2 M=4 sgd"]["iso_loss_overhead"] is None
    with open(tmp_path / "plan.csv", encoding="utf-8") as fh:
        csv_rows = {r["label"]: r for r in csv.DictReader(fh)}
    assert float(csv_rows["pipedream S=2 sgd"]["iso_loss_overhead"]) == pytest.approx(1.15)
    assert (tmp_path / "pareto.png").stat().st_size > 0
