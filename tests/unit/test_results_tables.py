"""Every table of docs/RESULTS.md equals the one rendered from its stored artifacts.

The tables sit between ``<!-- table:NAME -->`` markers; :mod:`lab.reproduce.tables`
rebuilds each from ``docs/results/`` and ``figures/`` (configs, per-seed JSONL, figure CSVs).
A number edited by hand, or an artifact replaced without regenerating the table, fails here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.reproduce.tables import (
    FIG,
    GPU_RENDERERS,
    LOCAL_SPEEDUP,
    RENDERERS,
    blocks,
    check,
    render_all,
    write_local_speedups,
)
from stalesim.errors import StalesimError

ROOT = Path(__file__).resolve().parents[2]
MD = ROOT / "docs" / "RESULTS.md"


def test_every_results_table_equals_its_artifacts():
    diffs = check(MD, ROOT)
    assert not diffs, "\n".join(diffs) + "\nregenerate: python -m lab.reproduce tables --write"


def test_the_local_speedup_artifact_is_what_its_writer_computes(tmp_path):
    """The local-updates table reads a stored CSV of simulated speed-ups; its writer (a
    roofline simulation, no training) reproduces it exactly from the stored profile."""
    (tmp_path / FIG).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / FIG).symlink_to(ROOT / FIG)
    out = write_local_speedups(tmp_path)
    assert out.read_text() == (ROOT / LOCAL_SPEEDUP).read_text()


def test_every_renderer_has_a_table_and_tables_cover_the_sections():
    names = [n for n, _ in blocks(MD.read_text())]
    assert sorted(set(names)) == sorted(set(RENDERERS) | set(GPU_RENDERERS))
    assert len(names) == len(set(names))
    # no markdown table left outside the markers (every table is generated)
    text = MD.read_text()
    for _name, body in blocks(text):
        text = text.replace(body, "")
    stray = [line for line in text.splitlines() if line.startswith("| ---")]
    assert not stray, stray


def test_an_edited_number_is_caught(tmp_path):
    md = tmp_path / "RESULTS.md"
    text = MD.read_text()
    body = dict(blocks(text))["memory-table9"]
    md.write_text(text.replace(body, body.replace("88.78", "88.79")))
    diffs = check(md, ROOT)
    assert len(diffs) == 1 and "memory-table9" in diffs[0] and "88.79" in diffs[0]


def test_a_changed_artifact_is_caught(tmp_path):
    # copy the stored hybrid study, change one seed's accuracy: the mitigations table must differ
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "figures", root / "figures")
    f = root / "docs" / "results" / "lenet5_mnist_hybrid" / "results_per_seed.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    recs[0]["final_test_accuracy"] = 0.5
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    diffs = check(root / "docs" / "RESULTS.md", root)
    assert any("lenet5-mitigations" in d and "50.00" in d for d in diffs)


def test_unknown_table_name():
    with pytest.raises(StalesimError, match="no renderer"):
        render_all("<!-- table:nope -->\nx\n<!-- /table:nope -->", ROOT)
