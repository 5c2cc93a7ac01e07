"""Soak of the newer surfaces' bad inputs, each a real ``stalesim`` process under a time limit:
``plan``/``sweep``/``simulate --workload`` flags, schedule files (malformed, oversized, deadlocking)
and every ``emulate``/``run --schedule-file`` flag combination.

Each case must end within ``LIMIT_S`` (a success that trains: ``LIMIT_TRAIN_S``) in exactly one
``stalesim: error:`` line (exit 2) naming the field, or in exit 0 with the answer the flags ask for
(a flag applied, never ignored); never a traceback, never a hang. The processes run two at a time
(the CI boxes are small).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stalesim.workloads.profile import uniform_profile

pytestmark = pytest.mark.slow  # about forty processes, a few of which import torch

LIMIT_S = 20
# a case that must succeed by training (emulate's few steps): torch's start on a busy CI box alone
# can take most of LIMIT_S; a refusal never gets that far
LIMIT_TRAIN_S = 90
LLM = ["--workload", "llama2-7b", "--node", "dgx-h100"]
TRAIN = ["--dataset", "synthetic", "--synthetic-size", "64", "--batch-size", "8"]


def _files(d: Path) -> dict[str, str]:
    """Schedule files, good and bad, and a profile."""
    out = {}
    prof = d / "p.json"
    uniform_profile(6, 1e-3, 2e-3, 128, output_bytes=10_000).to_json(prof)
    out["profile"] = str(prof)
    good = subprocess.run([sys.executable, "-m", "stalesim", "schedule", "1f1b", "-S", "2", "-M", "2", "--json"],
                          capture_output=True, text=True, timeout=60, check=True).stdout

    def put(name: str, text: str | bytes, ext: str = ".json") -> None:
        p = d / f"{name}{ext}"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = str(p)

    put("good", good)
    put("csv", "0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n", ".csv")
    put("csv_unicode", "0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B\u00e9\n", ".csv")
    put("deep", "[" * 50_000 + "]" * 50_000)
    put("digits", good.replace('"stages": 2', '"stages": ' + "9" * 5000, 1))
    put("key", good.replace('"actions": {\n    "0"', '"actions": {\n    "device zero"', 1))
    put("truncated", good[: len(good) // 2])
    put("empty", "")
    # counts are derived from the actions (never trusted from the header): huge indices make them huge
    put("huge_batches", good.replace('"0F0.0v0"', '"0F99999999.0v0"', 1))
    put("huge_micro", good.replace('"0F0.0v0"', '"0F0.999999999v0"', 1))
    # device 0 starts with micro-batch 0's backward, which waits for device 1's, which waits for the
    # forward device 0 has not run: a cycle (communication is derived from the order, not read)
    bad = json.loads(good)
    acts = bad["actions"]["0"]
    acts.insert(0, acts.pop(acts.index("0B0.0v0")))
    put("deadlock", json.dumps(bad))
    os.mkfifo(d / "fifo.json")
    out["fifo"] = str(d / "fifo.json")
    return out


def _cases(f: dict[str, str]) -> list[tuple[str, list[str], str | None]]:
    """(id, argv, what exit 0 must print, or None: must be refused)."""
    sim = ["simulate", "--profile", f["profile"]]
    cases: list[tuple[str, list[str], str | None]] = [
        # plan --workload: flags that were accepted and ignored, and the two that hung
        ("plan zero 4", ["plan", *LLM, "--devices", "8", "--zero", "4"], None),
        ("plan recompute", ["plan", *LLM, "--devices", "8", "--recompute", "bogus"], None),
        ("plan precision", ["plan", *LLM, "--devices", "8", "--precision", "fp8"], None),
        ("plan optimizer", ["plan", *LLM, "--devices", "8", "--optimizer", "nosuch"], None),
        ("plan sp", ["plan", *LLM, "--devices", "8", "--tp", "1", "--sp"], None),
        ("plan node-size", ["plan", "--workload", "llama2-7b", "--target", "h100-sxm", "--link", "nvlink4",
                            "--node-size", "3", "--inter-link", "ib-ndr", "--devices", "8"], None),
        ("plan batch", ["plan", *LLM, "--devices", "8", "--batch-size", "7"], None),
        ("plan check", ["plan", *LLM, "--devices", "8", "--check", "1"], None),
        ("plan profile", ["plan", *LLM, "--devices", "8", "--profile", f["profile"]], None),
        ("plan ok", ["plan", *LLM, "--devices", "8", "--schedules", "1f1b", "--zero", "1"], "1f1b"),
        # sweep --workload: each list item checked
        ("sweep recompute", ["sweep", *LLM, "--schedules", "1f1b", "--recompute", "none,bogus"], None),
        ("sweep zero", ["sweep", *LLM, "--schedules", "1f1b", "--zero", "0,9"], None),
        ("sweep tp -8", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "-8"], None),
        ("sweep tp 0", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "0"], None),
        ("sweep gpus", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "8", "--pp", "8", "-P", "4", "--gpus", "64"],
         None),
        ("sweep schedules", ["sweep", *LLM, "--schedules", "1f1b,nosuch"], None),
        ("sweep ok", ["sweep", *LLM, "--schedules", "1f1b", "--tp", "1,2"], "1f1b"),
        # simulate --workload
        ("simulate zero", ["simulate", *LLM, "--schedule", "1f1b", "--zero", "5"], None),
        ("simulate batch", ["simulate", *LLM, "--schedule", "1f1b", "--tp", "2", "-P", "2", "-B", "3"], None),
        ("simulate ppv", ["simulate", *LLM, "--schedule", "1f1b", "--ppv", "3"], None),
        ("simulate nodes", ["simulate", *LLM, "--schedule", "1f1b", "-P", "12"], None),
        # schedule files: bounded and checked before use
        *((f"simulate file {k}", [*sim, "--schedule-file", f[k]], None)
          for k in ("deep", "digits", "key", "truncated", "empty", "huge_batches", "huge_micro", "csv_unicode",
                    "fifo", "deadlock")),
        ("simulate file ok", [*sim, "--schedule-file", f["good"]], "iteration"),
        ("simulate file -S", [*sim, "--schedule-file", f["good"], "-S", "3"], None),
        # emulate/run --schedule-file with the flags that shape a schedule: applied or refused
        ("emulate file -S 3", ["emulate", "--schedule-file", f["good"], *TRAIN, "-S", "3"], None),
        ("emulate file ppv 1,2", ["emulate", "--schedule-file", f["good"], *TRAIN, "--ppv", "1,2"], None),
        ("emulate file warmup", ["emulate", "--schedule-file", f["good"], *TRAIN, "--warmup", "1"], None),
        ("emulate file -V", ["emulate", "--schedule-file", f["good"], *TRAIN, "-V", "2"], None),
        ("emulate file schedule", ["emulate", "--schedule-file", f["good"], *TRAIN, "--schedule", "1f1b"], None),
        ("emulate file -M", ["emulate", "--schedule-file", f["good"], *TRAIN, "-M", "4"], None),
        ("emulate file ppv 2", ["emulate", "--schedule-file", f["good"], *TRAIN, "--ppv", "2", "--json"],
         '"ppv": [\n    2\n  ]'),
        ("emulate csv -S 3", ["emulate", "--schedule-file", f["csv"], *TRAIN, "--iterations", "8", "-S", "3"], None),
        ("run file -S 3", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "-S", "3"], None),
        ("run file ppv 1,2", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "--ppv", "1,2"],
         None),
        ("run file fold", ["run", "--schedule-file", f["good"], *TRAIN, "--devices", "cpu:2", "--fold", "1"], None),
    ]
    return cases


def _run(argv: list[str], cwd: Path, limit: float) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run([sys.executable, "-m", "stalesim", *argv], capture_output=True, text=True,
                           timeout=limit, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout, p.stderr


def _limit(argv: list[str], expect: str | None) -> float:
    return LIMIT_TRAIN_S if expect is not None and argv[0] in ("emulate", "run") else LIMIT_S


def test_bad_inputs_end_in_one_line_or_a_correct_answer(tmp_path: Path) -> None:
    files = _files(tmp_path)
    cases = _cases(files)
    assert len(cases) >= 40
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: _run(c[1], tmp_path, _limit(c[1], c[2])), cases))
    problems: list[Any] = []
    for (name, argv, expect), (rc, out, err) in zip(cases, results):
        lines = err.strip().splitlines()
        if rc is None:
            problems.append((name, f"no answer in {_limit(argv, expect)} s"))
        elif "Traceback" in err:
            problems.append((name, "traceback", err[-300:]))
        elif expect is None and not (rc == 2 and len(lines) == 1 and lines[0].startswith("stalesim: error: ")):
            problems.append((name, rc, err[-300:]))
        elif expect is not None and not (rc == 0 and expect in out):
            problems.append((name, rc, out[-300:], err[-300:]))
    assert problems == [], "\n".join(map(str, problems))
