"""The nanoGPT-style example runs and its wrapped loop equals the emulator (CI-sized)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt_stale.py"
TINY = ["--model", "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16", "--batch-size", "8", "--steps", "6"]


def _main():
    spec = importlib.util.spec_from_file_location("nanogpt_stale", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.mark.parametrize("extra", [["--schedule", "stale", "--stages", "3"],
                                   ["--schedule", "2bw", "--stages", "2", "--microbatches", "2"]])
def test_example_on_synthetic_text_matches_the_emulator(extra, capsys):
    assert _main()([*TINY, "--dataset", "synthetic", *extra]) == 0
    out = capsys.readouterr().out
    assert "versions read = IR's: True" in out and "largest loss difference 0 (bit for bit)" in out


def test_example_on_shakespeare_matches_the_emulator(real_data_dir, capsys):
    assert _main()([*TINY, "--data-dir", str(real_data_dir), "--schedule", "pipedream", "--stages", "3"]) == 0
    assert "bit for bit" in capsys.readouterr().out
