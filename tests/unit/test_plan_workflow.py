"""The plan's progress line while emulations run (stderr not a terminal)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stalesim.plan import workflow


def test_heartbeat_counts_finished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "results.jsonl"
    log.write_text(json.dumps({"run_id": "old"}) + "\n")
    with workflow._heartbeat(log, {"a", "b", "c"}, enabled=True, every_s=0.05):
        with open(log, "a") as fh:
            fh.write(json.dumps({"run_id": "a"}) + "\n" + json.dumps({"run_id": "b"}) + "\n")
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "plan: 2/3 emulation(s) finished" in err
    with workflow._heartbeat(log, {"a"}, enabled=False, every_s=0.01):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


def test_a_batched_early_stop_the_confirmed_crossings_no_longer_make_is_undone() -> None:
    from stalesim.plan.convergence import CANNOT_WIN, Convergence

    stopped = Convergence([None, None], 200, CANNOT_WIN, None, "stopped at 200 iterations: ...")
    convs = {"kept": stopped, "undone": stopped, "reached": Convergence([50, 60], 200, "reached")}
    out = workflow._recheck_stopped(convs, {"kept": "stopped at 200 iterations: ...", "undone": "", "reached": ""})
    assert out["kept"] is stopped and out["reached"] is convs["reached"]
    assert out["undone"].status == "not reached" and out["undone"].per_seed == [None, None]
    assert out["undone"].note.startswith("stopped at 200 iterations: ...; the single runs moved the crossings")
