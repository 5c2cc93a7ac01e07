"""``--slurm-config FILE``: the TOML file's settings reach the array's sbatch script, the
``--slurm-*`` flags override them, and a bad file is one ``stalesim: error:`` line naming
the field (before anything runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from _cli import run_cli

from stalesim.cli.launch_args import add_launcher_args, launch_spec_from_args
from stalesim.errors import StalesimError
from stalesim.launch import make_launcher
from stalesim.launch.slurm_config import load_slurm_config, parse_slurm_config

GOOD = """
partition = "gpu"
time = 120
gpus_per_task = 1
cpus_per_task = 4
mem_gb = 16
array_parallelism = 6

[sbatch]
account = "proj123"
qos = "normal"
exclusive = true
"""


def _args(tmp_path: Path, text: str, *flags: str) -> argparse.Namespace:
    conf = tmp_path / "slurm.toml"
    conf.write_text(text)
    p = argparse.ArgumentParser()
    add_launcher_args(p)
    return p.parse_args(["--launcher", "slurm", "--local", "--slurm-config", str(conf), *flags])


def test_file_settings_and_flags_over_them(tmp_path):
    pytest.importorskip("submitit")
    spec = launch_spec_from_args(_args(tmp_path, GOOD))
    assert (spec.slurm_partition, spec.slurm_time_min, spec.slurm_gpus, spec.slurm_cpus, spec.slurm_mem_gb,
            spec.slurm_array_parallelism) == ("gpu", 120, 1, 4, 16.0, 6)
    assert spec.slurm_sbatch == (("account", "proj123"), ("qos", "normal"), ("exclusive", True))
    over = launch_spec_from_args(_args(tmp_path, GOOD, "--slurm-partition", "debug", "--slurm-time", "30",
                                       "--slurm-gpus", "0", "--slurm-cpus", "2", "--slurm-mem", "8"))
    assert (over.slurm_partition, over.slurm_time_min, over.slurm_gpus, over.slurm_cpus,
            over.slurm_mem_gb) == ("debug", 30, 0, 2, 8.0)
    assert over.slurm_array_parallelism == 6 and over.slurm_sbatch == spec.slurm_sbatch
    # an empty file: the flags' defaults
    empty = launch_spec_from_args(_args(tmp_path, ""))
    assert (empty.slurm_time_min, empty.slurm_gpus, empty.slurm_cpus, empty.slurm_sbatch) == (60, 0, None, ())


def test_file_reaches_the_sbatch_script(tmp_path, monkeypatch):
    """As submitit writes the array's sbatch script (sbatch and srun are stand-ins)."""
    pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'Submitted batch job 1'\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    args = _args(tmp_path, GOOD, "--slurm-time", "45")
    args.local = False
    spec = launch_spec_from_args(args)
    launcher = make_launcher(spec, jobs=18, threads=1, folder=tmp_path / "logs")
    text = launcher.executor._executor._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=4", "--mem=16GB", "--time=45",
                 "--account=proj123", "--qos=normal", "--exclusive"):
        assert f"#SBATCH {line}\n" in text
    assert "--signal=USR2@" in text  # the requeue signal is still submitit's
    assert launcher.executor._executor.parameters["array_parallelism"] == 6  # the file's, not --jobs


@pytest.mark.parametrize("text,field", [
    ("partiton = 'gpu'", "slurm_config.partiton: unknown key"),
    ("time = '2h'", "slurm_config.time: expected minutes per task"),
    ("time = 0", "slurm_config.time: expected minutes per task"),
    ("gpus_per_task = -1", "slurm_config.gpus_per_task: expected GPUs per task"),
    ("cpus_per_task = true", "slurm_config.cpus_per_task: expected CPUs per task"),
    ("mem_gb = 0", "slurm_config.mem_gb: expected GB per task"),
    ("array_parallelism = 1.5", "slurm_config.array_parallelism: expected array tasks at once"),
    ("partition = ''", "slurm_config.partition: expected a partition name"),
    ("sbatch = 3", "slurm_config.sbatch: expected a table"),
    ("[sbatch]\npartition = 'gpu'", "slurm_config.sbatch.partition: use the key partition"),
    ("[sbatch]\n'--gpus-per-node' = 2", "slurm_config.sbatch.--gpus-per-node: use the key gpus_per_task"),
    ("[sbatch]\narray = '0-3'", "slurm_config.sbatch.array: submitit writes this option itself"),
    ("[sbatch]\nexclusive = false", "slurm_config.sbatch.exclusive: false is not an sbatch option"),
    ("[sbatch]\nconstraint = ['a', 'b']", "slurm_config.sbatch.constraint: expected a string, number or true"),
    ("[sbatch]\n'a b' = 1", "slurm_config.sbatch.a b: not an sbatch option name"),
    ("time = ", "is not valid TOML"),
])
def test_bad_file_is_one_line_naming_the_field(capsys, tmp_path, text, field):
    pytest.importorskip("submitit")
    conf = tmp_path / "slurm.toml"
    conf.write_text(text)
    rc, out, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                    "--launcher", "slurm", "--local", "--slurm-config", str(conf),
                                    "--out", str(tmp_path / "s")])
    assert rc == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("stalesim: error: ") and field in line
    assert not (tmp_path / "s").exists()


def test_missing_file_and_other_launchers(capsys, tmp_path):
    with pytest.raises(StalesimError, match="slurm_config: cannot read"):
        load_slurm_config(tmp_path / "none.toml")
    rc, _, err = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "1",
                                  "--slurm-config", str(tmp_path / "none.toml"), "--out", str(tmp_path / "s")])
    assert rc == 2 and err.strip() == "stalesim: error: slurm_config: --slurm-config is for --launcher slurm"


def test_parse_keeps_only_what_the_file_says():
    conf = parse_slurm_config({"time": 30})
    assert conf.time_min == 30 and conf.partition is None and conf.gpus is None and conf.sbatch == ()
