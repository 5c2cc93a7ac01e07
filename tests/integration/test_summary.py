"""stalesim.summary: one RunSummary schema for emulate, study and run (and the engines'
shared dispatch names, stalesim.schedule.dispatch)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stalesim.schedule import Kind, ScheduleConfig, build_schedule
from stalesim.schedule.actions import VERSIONED_KINDS
from stalesim.schedule.dispatch import EXEC_METHODS, dispatch_table
from stalesim.summary import (
    DEPRECATED,
    DEPRECATED_OTHER,
    FIELDS,
    RunSummary,
    field_docs,
    get,
    summary_keys,
    version_facts,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_is_documented_here_and_in_docs() -> None:
    docs = field_docs()
    assert all(len(text) > 12 for text in docs.values()), [k for k, t in docs.items() if len(t) <= 12]
    page = (ROOT / "docs" / "summary.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.M))
    assert set(FIELDS) | set(DEPRECATED) | set(DEPRECATED_OTHER) == listed


def test_to_dict_writes_every_field_and_the_deprecated_spellings() -> None:
    emu = RunSummary(producer="emulate", staleness_ir=[2, 0], staleness_measured=[1, 0],
                     final_test_accuracy=0.5, final_val_loss=None, versions_match_ir=True).to_dict()
    run = RunSummary(producer="run", staleness_ir=[2, 0], staleness_measured=[1, 0],
                     final_test_accuracy=0.25, versions_match_ir=False).to_dict()
    assert set(emu) == set(run) == summary_keys()
    for old, new in DEPRECATED.items():
        assert emu[old] == emu[new] and run[old] == run[new]
    assert (emu["test_accuracy"], run["test_accuracy"]) == (0.5, 0.25)
    assert (emu["versions_match"], run["versions_match"]) == (True, False)
    # the old `staleness` keeps each producer's old meaning for its last release
    assert emu["staleness"] == [2, 0] and run["staleness"] == [1, 0]
    assert (emu["executor"], run["executor"]) == (False, True)
    # list defaults are per instance
    a, b = RunSummary(), RunSummary()
    a.losses.append(1.0)
    assert b.losses == []


def test_get_reads_summaries_written_before_the_schema() -> None:
    old_emulate = {"final_test_accuracy": 0.9, "staleness": [2, 0], "versions_match": True}
    old_run = {"executor": True, "test_accuracy": 0.8, "val_loss": None, "staleness": [1, 0],
               "staleness_ir": [2, 0], "versions_match_ir": True}
    assert get(old_emulate, "final_test_accuracy") == 0.9 and get(old_run, "final_test_accuracy") == 0.8
    assert get(old_emulate, "staleness_ir") == [2, 0] and get(old_emulate, "staleness_measured") is None
    assert get(old_run, "staleness_ir") == [2, 0] and get(old_run, "staleness_measured") == [1, 0]
    assert get(old_emulate, "versions_match_ir") is True and get(old_run, "final_val_loss") is None
    assert get({}, "final_loss", "absent") == "absent"


def _used(sched) -> list[tuple[str, int]]:
    """The log a correct run writes: every versioned action's IR version, every U's u."""
    out = []
    for acts in sched.device_actions:
        for a in acts:
            if a.kind in VERSIONED_KINDS:
                out.append((str(a.with_version(None)), a.version))
            elif a.kind is Kind.U:
                out.append((str(a), sched.versions.u(a.stage, a.batch, a.worker)))
    return out


def test_version_facts_check_a_split_backwards_i_and_w() -> None:
    sched = build_schedule(ScheduleConfig("zb-h1", stages=2, batches=2, microbatches=2))
    used = _used(sched)
    assert {t for t, _ in used if "I" in t} and {t for t, _ in used if "W" in t}
    good = version_facts(sched, used)
    assert good["versions_match_ir"] and good["version_mismatches"] == []
    assert good["staleness_ir"] == good["staleness_measured"] == [0, 0]
    assert good["schedule_fingerprint"] == sched.fingerprint() and good["policy"] == sched.policy.value
    for kind in ("I", "W", "U"):
        bad = [(t, v + 1) if re.fullmatch(rf"0{kind}1(\.1)?", t) else (t, v) for t, v in used]
        facts = version_facts(sched, bad)
        assert not facts["versions_match_ir"], kind
        assert facts["version_mismatches"] and all(f"0{kind}1" in m for m in facts["version_mismatches"])


def test_measured_staleness_comes_from_the_log() -> None:
    sched = build_schedule(ScheduleConfig("stale", stages=3, batches=6))
    used = _used(sched)
    assert version_facts(sched, used)["staleness_measured"] == sched.versions.staleness() == [4, 2, 0]
    # forwards that read a newer version than the IR's: less staleness measured, and a mismatch
    fresher = [(t, v + 1) if re.fullmatch(r"0F[2-5]", t) else (t, v) for t, v in used]
    facts = version_facts(sched, fresher)
    assert facts["staleness_measured"] == [3, 2, 0] and facts["staleness_ir"] == [4, 2, 0]
    assert len(facts["version_mismatches"]) == 4 and not facts["versions_match_ir"]


def test_every_kind_has_one_method_in_both_engines() -> None:
    from stalesim.emulator.batched import BatchedEmulator
    from stalesim.emulator.replay import Emulator
    from stalesim.executor.rank import Rank

    assert set(EXEC_METHODS) == set(Kind) and len(set(EXEC_METHODS.values())) == len(Kind)
    for engine in (Emulator, BatchedEmulator, Rank):
        for name in EXEC_METHODS.values():
            assert callable(getattr(engine, name, None)), f"{engine.__name__}.{name}"

    class Partial:
        def _exec_forward(self, a) -> None: ...

    with pytest.raises(TypeError, match="_exec_loss"):
        dispatch_table(Partial())


# emulate and run of the same config: the same keys, equal values where they must agree
SAME = ["--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "96", "--batch-size", "24",
        "--schedule", "stale", "--stages", "2", "--iterations", "4", "--dtype", "float64"]
MUST_AGREE = ("schedule", "model", "dataset", "task", "optimizer", "data_note", "stages", "workers",
              "microbatches", "devices", "device_kind", "policy", "batch_size", "lr", "momentum",
              "weight_decay", "lr_schedule", "seed", "epochs", "iterations", "batches_per_epoch",
              "mitigations", "batched", "steps_done", "losses", "final_loss", "diverged", "diverged_at",
              "final_test_accuracy", "final_val_loss", "final_val_bpc", "epoch_metrics",
              "schedule_fingerprint", "staleness_ir", "staleness_measured", "weight_inconsistent_stages",
              "versions_match_ir", "version_mismatches", "stash_peak_bytes")

# what differs by nature: who ran it, where, and each producer's own measurements
OWN = ("producer", "label", "ppv", "run_dir", "stage_losses", "wall_s", "wall_time_s", "setup_s", "cpu_affinity",
       "iteration_time_s", "throughput_samples_per_s", "utilization", "utilization_whole_run", "time_by_kind_s",
       "warmup_batches_skipped", "timing_window", "inflight_peak_bytes", "peak_memory_bytes",
       "peak_memory_parts", "setup_peak_memory_bytes", "run_start_allocated_bytes", "peak_memory_kind")


def _cli(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "stalesim", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.slow
def test_emulate_and_run_json_have_the_same_keys_and_meanings(tmp_path) -> None:
    emu = _cli("emulate", *SAME, "--quiet", "--json")
    run = _cli("run", *SAME, "--devices", "cpu:2", "--out", str(tmp_path / "run"), "--json")
    assert set(emu) == set(run) == summary_keys()
    assert set(MUST_AGREE) | set(OWN) == set(FIELDS)  # a new field must say which it is
    for key in MUST_AGREE:
        assert emu[key] == run[key], key
    assert emu["staleness_ir"] == [2, 0] and emu["versions_match_ir"] and len(emu["losses"]) == 4
    assert (emu["producer"], run["producer"]) == ("emulate", "run")
    # each producer's own measurements are there, the other's are null
    assert run["iteration_time_s"] > 0 and emu["iteration_time_s"] is None
    assert emu["inflight_peak_bytes"] > 0 and run["inflight_peak_bytes"] is None
    assert emu["wall_s"] > 0 and run["wall_s"] > 0
    stored = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert stored["losses"] == run["losses"] and set(stored) == set(run)
