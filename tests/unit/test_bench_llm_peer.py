"""The peer benchmark (benchmarks/bench_llm_peer.py): it skips cleanly without llm-analysis,
and, where llm-analysis is installed, its stored side-by-side file equals a fresh run and
shows stalesim ahead on the median and the max time error over the same rows."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from benchmarks import bench_llm_peer as peer

ROOT = Path(__file__).resolve().parents[2]


def test_without_llm_analysis_it_says_so_and_exits_zero(monkeypatch, capsys):
    monkeypatch.setattr(peer, "available", lambda: False)
    assert peer.main([]) == 0
    assert "not installed" in capsys.readouterr().out


def test_the_stored_comparison_has_stalesim_ahead_on_median_and_max():
    with open(ROOT / peer.PEER_CSV, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    both = [r for r in rows if r["stalesim_error_pct"] and r["peer_error_pct"]]
    assert len(both) >= 30
    s = [abs(float(r["stalesim_error_pct"])) for r in both]
    p = [abs(float(r["peer_error_pct"])) for r in both]
    assert statistics.median(s) < statistics.median(p) and max(s) < max(p), (statistics.median(s), max(s),
                                                                                statistics.median(p), max(p))


def test_the_stored_comparison_equals_a_fresh_run(monkeypatch):
    pytest.importorskip("llm_analysis")
    monkeypatch.chdir(ROOT)
    assert peer.to_csv(peer.compare(ROOT)) == (ROOT / peer.PEER_CSV).read_text(encoding="utf-8"), \
        "regenerate: python -m benchmarks.bench_llm_peer --write"
