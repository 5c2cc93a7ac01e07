"""``stalesim validate`` on the char-GPT end to end: token inputs wherever the model is driven
(profile, co-runners, probes, memory facts, ranks, emulator), on a plain, a zero-bubble and
a virtual-stage schedule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _fixed_hardware import fixed_hardware

from stalesim.cli import main

TINY_GPT = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
SCHEDULES = ["1f1b", "zb-h1", "interleaved-1f1b"]


def test_validate_tiny_gpt_two_cpu_ranks(tmp_path: Path, capfd) -> None:
    out = tmp_path / "v"
    hw = fixed_hardware(tmp_path)  # the link and per-message costs: the calibrations are tested elsewhere
    rc = main(["validate", "--model", TINY_GPT, "--dataset", "synthetic", "--devices", "cpu:2",
               "--schedules", ",".join(SCHEDULES), "--batch-size", "8", "--microbatches", "4",
               "--iterations", "8", "--repeats", "1", "--profile-repeats", "1", "--emulate-iterations", "3",
               "--hardware", str(hw), "--out", str(out), "--quiet"])
    text = capfd.readouterr().out
    assert rc == 0
    assert all(s in text for s in SCHEDULES)
    summary = json.loads((out / "summary.json").read_text())
    assert [r["schedule"] for r in summary["rows"]] == SCHEDULES
    for r in summary["rows"]:
        assert not r.get("error"), r["schedule"]
        assert r["predicted_iteration_time_s"] > 0 and r["measured_iteration_time_s"] > 0
        assert math.isfinite(r["time_error"])
        # memory: the same bytes on both sides, per device, to the byte
        assert len(r["predicted_peak_memory_bytes"]) == 2
        assert r["predicted_peak_memory_bytes"] == r["measured_peak_memory_bytes"]
        assert min(r["measured_peak_memory_bytes"]) > 0
        # the emulator replays the executor's losses exactly (CPU)
        assert r["max_loss_rel_diff"] == 0.0
    assert "busy" in summary and summary["busy"]["cores_used"] == 2
    # the attribution: per device the terms add up to each side's iteration time
    by_row = {r["schedule"]: r for r in summary["rows"]}
    assert {(a["schedule"], a["device"]) for a in summary["attribution"]} == {(s, d) for s in SCHEDULES
                                                                             for d in (0, 1)}
    for a in summary["attribution"]:
        r = by_row[a["schedule"]]
        assert a["predicted_ms"] == pytest.approx(1e3 * r["predicted_iteration_time_s"], rel=1e-6)
        assert a["measured_ms"] == pytest.approx(1e3 * r["measured_iteration_time_s"], rel=1e-6)
    assert (out / "attribution.csv").read_text().startswith("schedule,device,stage,term,predicted_ms")
    report = (out / "report.md").read_text()
    assert all(f"| {s} |" in report for s in SCHEDULES)
    assert "### Where the time error lies" in report
