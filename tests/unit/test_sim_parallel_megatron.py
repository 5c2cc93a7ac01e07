"""Megatron-LM's Table 1 (Narayanan et al., SC21): the stored predictions equal the code's,
and the agreement with the published teraFLOP/s meets its goal (median <= 10 %, max <= 20 %)."""

from pathlib import Path

from lab.reproduce.megatron import KORTHIKANTI, RES, error_stats, korthikanti_rows, predict_rows, to_csv

ROOT = Path(__file__).resolve().parents[2]


def test_stored_predictions_equal_the_code():
    rows = predict_rows(ROOT)
    assert to_csv(rows) == (ROOT / RES / "predicted.csv").read_text(encoding="utf-8"), \
        "regenerate: python -m lab.reproduce.megatron && python -m lab.reproduce tables --write"
    med, mx = error_stats(rows)
    assert med <= 10.0 and mx <= 20.0, (med, mx)
    assert len(rows) == 10 and rows[-1]["gpus"] == 3072


def test_stored_korthikanti_rows_equal_the_code():
    import csv

    with open(ROOT / KORTHIKANTI / "activations.csv", newline="") as fh:
        stored = list(csv.DictReader(fh))
    rows = korthikanti_rows()
    assert [{k: str(v) for k, v in r.items()} for r in rows] == stored
    assert all(abs(r["error_pct"]) < 1e-6 for r in rows)
