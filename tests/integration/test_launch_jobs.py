"""stalesim.launch: the launch spec's checks, the missing-extra error, a job's log, and the
local launcher going on past a failed job (no study: jobs are stdlib calls)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from _cli import run_cli

from stalesim.errors import StalesimError
from stalesim.launch import Job, LaunchSpec, make_launcher
from stalesim.launch.jobs import call_logged


def test_spec_refuses_flags_of_another_launcher():
    with pytest.raises(StalesimError, match="--launcher slurm"):
        LaunchSpec(launcher="local", local=True).check()
    with pytest.raises(StalesimError, match="--ray-address is for --launcher ray"):
        LaunchSpec(launcher="slurm", ray_address="auto").check()
    with pytest.raises(StalesimError, match="unknown 'mpi'"):
        LaunchSpec(launcher="mpi").check()
    assert LaunchSpec().on_this_machine and not LaunchSpec(launcher="ray", ray_address="auto").on_this_machine


@pytest.mark.parametrize("launcher,module,extra", [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")])
def test_missing_extra_is_one_line_naming_it(capsys, tmp_path, monkeypatch, launcher, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    rc, out, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                    "--launcher", launcher, "--out", str(tmp_path / "s")])
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [f"stalesim: error: launcher: --launcher {launcher} needs {module}: "
                                        f"pip install stalesim[{extra}]"]
    assert not (tmp_path / "s").exists()  # refused before anything was written


def test_missing_tensorboard_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    rc, _, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                  "--tensorboard", str(tmp_path / "tb"), "--out", str(tmp_path / "s")])
    assert rc == 2 and "pip install stalesim[tensorboard]" in err and len(err.strip().splitlines()) == 1


def test_slurm_flags_without_slurm_are_refused(capsys, tmp_path):
    rc, _, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                  "--slurm-partition", "gpu", "--out", str(tmp_path / "s")])
    assert rc == 2 and "--slurm-* flags are for --launcher slurm" in err
    rc, _, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                  "--device", "cuda", "--launcher", "slurm", "--out", str(tmp_path / "s")])
    assert rc == 2 and err.strip() == ("stalesim: error: slurm_gpus: --device cuda on a cluster needs GPUs "
                                       "per task: --slurm-gpus 1")


def test_call_logged_writes_output_and_traceback(tmp_path):
    ok = Job("ok", json.loads, ('{"a": 1}',), tmp_path / "ok.log")
    assert call_logged(ok) == {"a": 1}
    bad = Job("bad", json.loads, ("{",), tmp_path / "bad.log")
    with pytest.raises(json.JSONDecodeError):
        call_logged(bad)
    text = (tmp_path / "bad.log").read_text()
    assert "Traceback" in text and "JSONDecodeError" in text


def test_local_launcher_reports_a_failure_and_runs_the_others(tmp_path):
    jobs = [Job("a", json.loads, ("1",), tmp_path / "a.log"), Job("b", json.loads, ("{",), tmp_path / "b.log"),
            Job("c", json.loads, ("3",), tmp_path / "c.log")]
    launcher = make_launcher(LaunchSpec(), jobs=2, threads=1, folder=tmp_path)
    got = {job.run_id: res for job, res in launcher.run(jobs)}
    assert got == {"a": 1, "c": 3}
    [fail] = launcher.failures
    assert fail.run_id == "b" and fail.log == tmp_path / "b.log" and "JSONDecodeError" in fail.error
    assert "JSONDecodeError" in fail.log.read_text()
    assert "b (JSONDecodeError" in fail.describe() and str(tmp_path / "b.log") in fail.describe()


def test_slurm_without_sbatch_is_one_line(capsys, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no srun
    rc, _, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                  "--launcher", "slurm", "--out", str(tmp_path / "s")])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "sbatch, which is not on this machine's PATH" in err and "--local" in err


def test_slurm_options_reach_the_sbatch_script(tmp_path, monkeypatch):
    """The flags as submitit writes them into the array's sbatch script (sbatch and srun are
    stand-ins here: submitit looks for srun before it writes anything)."""
    pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'Submitted batch job 1'\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    spec = LaunchSpec(launcher="slurm", slurm_partition="gpu", slurm_gpus=1, slurm_mem_gb=16, slurm_time_min=120)
    launcher = make_launcher(spec, jobs=18, threads=4, folder=tmp_path / "logs")
    text = launcher.executor._executor._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=4", "--mem=16GB", "--time=120"):
        assert f"#SBATCH {line}\n" in text
    assert "--signal=USR2@" in text  # submitit's preemption signal: the task checkpoints and is requeued
    assert launcher.executor._executor.parameters["array_parallelism"] == 18
