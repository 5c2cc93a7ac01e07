"""``plan --launcher``: the candidates' emulations placed by submitit's local executor (real
subprocesses, pickled jobs) and by a local Ray instance give the local launcher's plan
(the same losses, so the same iterations to target and the same ranking), and a plan run
again under another launcher reuses every stored emulation instead of running it again."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from _cli import run_cli

from stalesim.cli import main
from stalesim.workloads.profile import uniform_profile

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> str:
    prof = uniform_profile(2, 1e-3, 2e-3, 8, 1e-4, param_bytes=2**16, output_bytes=2**10, saved_bytes=2**12,
                           model=TINY, device="cpu")
    path = tmp_path_factory.mktemp("prof") / "prof.json"
    prof.to_json(path)
    return str(path)


def _plan(profile: str, out: Path, *launcher: str) -> tuple[dict, dict[str, list[float]]]:
    argv = ["plan", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
            "--lr", "0.01", "--devices", "2", "--schedules", "stale", "--mitigations", "none", "--warmups", "0",
            "--seeds", "0", "--target-loss", "100", "--smooth", "2", "--iterations", "3", "--max-horizon", "3",
            "--jobs", "2", "--profile", profile, "--out", str(out), "--json", "--quiet", *launcher]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(argv)
    assert rc == 0, stderr.getvalue()
    lines = (out / "emulations" / "study" / "results.jsonl").read_text().splitlines()
    return json.loads(stdout.getvalue()), {r["run_id"]: r["losses"] for r in map(json.loads, lines)}


def _ranked(doc: dict) -> list[tuple]:
    return [(r["label"], r["status"], r["iterations_mean"], r.get("time_to_target_s")) for r in doc["rows"]]


@pytest.fixture(scope="module")
def local_plan(tmp_path_factory, profile) -> tuple[dict, dict[str, list[float]]]:
    return _plan(profile, tmp_path_factory.mktemp("local"))


@pytest.mark.parametrize("name", ["slurm", "ray"])
def test_plan_emulations_under_a_launcher_equal_local(tmp_path, profile, local_plan, name):
    pytest.importorskip("submitit" if name == "slurm" else "ray")
    flags = ["--launcher", "slurm", "--local"] if name == "slurm" else ["--launcher", "ray"]
    local_doc, local_losses = local_plan
    doc, losses = _plan(profile, tmp_path / name, *flags)
    assert local_doc["emulations_run"] == doc["emulations_run"] == 2  # sequential S=1 and stale S=2
    assert losses == local_losses and len(losses) == 2 and all(len(v) == 3 for v in losses.values())
    assert _ranked(doc) == _ranked(local_doc)
    assert (tmp_path / name / "emulations" / "study" / "logs").is_dir()
    # the same plan again under the local launcher: every emulation is reused, none runs
    again, _ = _plan(profile, tmp_path / name)
    assert again["emulations_run"] == 0 and again["emulations_reused"] == 2
    assert _ranked(again) == _ranked(local_doc)


def test_launcher_flags_with_workload_are_refused(capsys, tmp_path):
    rc, _, err = run_cli(capsys, ["plan", "--workload", "gpt3-1.3b", "--devices", "8", "--launcher", "ray"])
    assert rc == 2 and err.strip() == ("stalesim: error: launcher: --launcher does not apply to --workload "
                                       "(nothing is emulated)")
