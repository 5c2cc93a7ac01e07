"""``sweep --launcher``: the points as jobs placed by submitit's local executor (real
subprocesses, pickled jobs) and by a local Ray instance give the rows of today's local
sweep; a sweep run again into its folder simulates only the points without a row; a job
whose process dies is reported with its log while the other rows are kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from _cli import run_cli

from stalesim.errors import StalesimError
from stalesim.launch import LaunchSpec
from stalesim.sim.sweep import SweepPoint
from stalesim.sim.sweep_jobs import ROWS_FILE, chunk_jobs, run_sweep_jobs, settings_digest
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> str:
    prof = uniform_profile(8, 1e-3, 2e-3, 32, 1e-4, param_bytes=2**20, output_bytes=2**14, saved_bytes=2**16,
                           model="toy", device="cpu")
    path = tmp_path_factory.mktemp("prof") / "prof.json"
    prof.to_json(path)
    return str(path)


def _sweep(capsys, profile: str, *extra: str) -> list[dict]:
    rc, out, err = run_cli(capsys, ["sweep", "--profile", profile, "--schedules", "gpipe,1f1b,stale,pipedream",
                                    "--stages", "2,4", "--microbatches", "1,4", "--jobs", "2", "--json", *extra])
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def local_rows(profile) -> list[dict]:
    import contextlib
    import io

    from stalesim.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert main(["sweep", "--profile", profile, "--schedules", "gpipe,1f1b,stale,pipedream", "--stages", "2,4",
                     "--microbatches", "1,4", "--jobs", "2", "--json"]) == 0
    return json.loads(buf.getvalue())


@pytest.mark.parametrize("name", ["local", "slurm", "ray"])
def test_sweep_under_a_launcher_equals_the_local_sweep_and_resumes(capsys, tmp_path, profile, local_rows, name):
    pytest.importorskip({"local": "json", "slurm": "submitit", "ray": "ray"}[name])
    flags = {"local": [], "slurm": ["--launcher", "slurm", "--local"], "ray": ["--launcher", "ray"]}[name]
    out = tmp_path / "sweep"
    rows = _sweep(capsys, profile, *flags, "--out", str(out))
    assert len(rows) == len(local_rows) == 12 and not any(r["error"] for r in rows)
    assert rows == local_rows  # every column, in the same ranked order
    kept = (out / ROWS_FILE).read_text().splitlines()
    assert len(kept) == 12 and len(list((out / "logs").glob("points*.log"))) == 6  # 2 points a chunk
    # run again: every row is kept, nothing is simulated (no job, so no job log is created)
    shutil.rmtree(out / "logs")
    assert _sweep(capsys, profile, *flags, "--out", str(out)) == local_rows
    assert not list((out / "logs").glob("points*.log"))
    assert len((out / ROWS_FILE).read_text().splitlines()) == 12
    # other settings (another batch count) reuse nothing: every point is simulated again
    _sweep(capsys, profile, *flags, "--out", str(out), "--batches", "16")
    assert len(list((out / "logs").glob("points*.log"))) == 6
    again = [json.loads(x)["settings"] for x in (out / ROWS_FILE).read_text().splitlines()]
    assert len(again) == 12 and set(again).isdisjoint(json.loads(x)["settings"] for x in kept)


def test_launcher_needs_a_sweep_folder(capsys, profile):
    rc, _, err = run_cli(capsys, ["sweep", "--profile", profile, "--schedules", "gpipe", "--stages", "2",
                                  "--launcher", "ray"])
    assert rc == 2 and err.strip() == ("stalesim: error: out: --launcher ray needs --out DIR (its jobs' logs "
                                       "and the rows kept for a sweep run again)")


class _Worker:
    """A stand-in for the sweep's worker: its row is the point's stages; a point of 3 stages
    kills its process while ``die`` names an existing file (not part of its settings)."""

    def __init__(self, die: str) -> None:
        self.die = die

    def __getstate__(self) -> dict:
        return {"die": self.die}

    def __setstate__(self, state: dict) -> None:
        self.die = state["die"]

    def __call__(self, pt: SweepPoint) -> dict:
        if pt.stages == 3 and Path(self.die).exists():
            os._exit(9)
        return {"stages": pt.stages, "error": ""}


def test_a_dead_job_is_reported_and_only_its_points_run_again(tmp_path):
    die = tmp_path / "die"
    die.write_text("")
    points = [SweepPoint("gpipe", s) for s in range(1, 9)]
    worker = _Worker(str(die))
    assert [len(j.args[1]) for j in chunk_jobs(worker, points, jobs=1, out=tmp_path)] == [2, 2, 2, 2]
    out = tmp_path / "sweep"
    with pytest.raises(StalesimError) as err:
        run_sweep_jobs(worker, points, jobs=1, launcher=LaunchSpec(), out=out)
    msg = str(err.value)
    assert "1 job(s) failed" in msg and "points00002-00003" in msg and str(out / "logs") in msg and "\n" not in msg
    kept = [json.loads(x)["row"]["stages"] for x in (out / ROWS_FILE).read_text().splitlines()]
    assert sorted(kept) == [1, 2, 5, 6, 7, 8]
    die.unlink()
    rows = run_sweep_jobs(worker, points, jobs=1, launcher=LaunchSpec(), out=out)
    assert [r["stages"] for r in rows] == list(range(1, 9))
    assert not (out / "logs" / "points00000-00001.log").read_text()  # ran once, printed nothing
    assert len((out / ROWS_FILE).read_text().splitlines()) == 8  # 6 kept + the 2 of the job run again


class Opaque:
    """An object whose repr holds its memory address."""


def test_settings_digest_is_the_same_in_every_process():
    """The digest reads the worker's state, objects by their fields or their repr less any
    memory address: a copy (another process's unpickled worker) has the same digest."""
    import pickle

    a, b = _Worker("x"), _Worker("x")
    a.die, b.die = Opaque(), pickle.loads(pickle.dumps(Opaque()))
    assert settings_digest(a) == settings_digest(b) != settings_digest(_Worker("y"))
