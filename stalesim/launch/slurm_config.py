"""``--slurm-config FILE``: a cluster's Slurm settings in a TOML file, so that a group's
partition, account and limits are written once instead of on every command line.

The file's keys are those of the ``--slurm-*`` flags (per task) plus what only a file
holds, and a flag given on the command line overrides the file's value::

    partition = "gpu"          # --slurm-partition
    time = 120                 # --slurm-time, minutes per task
    gpus_per_task = 1          # --slurm-gpus
    cpus_per_task = 4          # --slurm-cpus
    mem_gb = 16                # --slurm-mem, GB per task
    array_parallelism = 18     # tasks of the array running at once (default --jobs)

    [sbatch]                   # any other sbatch option, written as #SBATCH --NAME=VALUE
    account = "proj123"
    qos = "normal"
    exclusive = true           # a flag without a value

The ``[sbatch]`` table is submitit's ``slurm_additional_parameters`` (its keys are written
with ``-`` for ``_``). Options submitit writes itself (the array, the log paths, the
requeue signal, one task per node) and those with a key above are refused there: a
second ``--partition`` line would silently win over the first. Each bad entry is one
:class:`StalesimError` naming ``slurm_config.<key>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError

#: the longest task accepted, in minutes (a year: Slurm's own limit is "UNLIMITED"; more is a typo)
MAX_MINUTES = 366 * 24 * 60
#: per-task counts accepted (GPUs, CPUs) and array tasks at once
MAX_PER_TASK = 1024
MAX_ARRAY_PARALLELISM = 100_000
#: sbatch options submitit writes itself (the array and its logs, the preemption signal that
#: requeues a task, one task on one node): set in [sbatch] they would break the requeue or the logs
SUBMITIT_OWNED = frozenset({"array", "output", "error", "signal", "job_name", "nodes", "ntasks_per_node",
                            "open_mode", "wckey"})
#: sbatch options that have a key of their own in the file (and a flag)
NAMED = {"partition": "partition", "time": "time", "gpus_per_node": "gpus_per_task", "gpus": "gpus_per_task",
         "cpus_per_task": "cpus_per_task", "mem": "mem_gb"}
KEYS = ("partition", "time", "gpus_per_task", "cpus_per_task", "mem_gb", "array_parallelism", "sbatch")


@dataclass(frozen=True)
class SlurmConfig:
    """The file's settings; ``None``: not in the file (the flag's or Slurm's default applies)."""

    partition: str | None = None
    time_min: int | None = None
    gpus: int | None = None
    cpus: int | None = None
    mem_gb: float | None = None
    array_parallelism: int | None = None
    sbatch: tuple[tuple[str, str | int | float | bool], ...] = ()


def _int(table: dict[str, Any], key: str, lo: int, hi: int, what: str) -> int | None:
    v = table.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise StalesimError(f"slurm_config.{key}: expected {what}, an integer in {lo}..{hi}, got {v!r}")
    return v


def _sbatch(table: Any) -> tuple[tuple[str, str | int | float | bool], ...]:
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise StalesimError(f"slurm_config.sbatch: expected a table of sbatch options (name = value), got {table!r}")
    out: list[tuple[str, str | int | float | bool]] = []
    for name, value in table.items():
        key = name.lstrip("-").replace("-", "_")
        if not key or not all(c.isalnum() or c == "_" for c in key):
            raise StalesimError(f"slurm_config.sbatch.{name}: not an sbatch option name")
        if key in SUBMITIT_OWNED:
            raise StalesimError(f"slurm_config.sbatch.{name}: submitit writes this option itself")
        if key in NAMED:
            raise StalesimError(f"slurm_config.sbatch.{name}: use the key {NAMED[key]} (or its --slurm-* flag)")
        if isinstance(value, float) and not math.isfinite(value) or not isinstance(value, (str, int, float)):
            raise StalesimError(f"slurm_config.sbatch.{name}: expected a string, number or true, got {value!r}")
        if value is False:
            raise StalesimError(f"slurm_config.sbatch.{name}: false is not an sbatch option (leave it out)")
        if isinstance(value, str) and ("\n" in value or not value.strip()):
            raise StalesimError(f"slurm_config.sbatch.{name}: expected a one-line value, got {value!r}")
        out.append((key, value))
    return tuple(out)


def parse_slurm_config(table: dict[str, Any]) -> SlurmConfig:
    """The settings of a parsed TOML table, each checked (unknown keys refused: a typo such as
    ``gpu = 1`` would otherwise run every task without a GPU)."""
    for key in table:
        if key not in KEYS:
            raise StalesimError(f"slurm_config.{key}: unknown key (known: {', '.join(KEYS)})")
    part = table.get("partition")
    if part is not None and (not isinstance(part, str) or not part.strip() or "\n" in part):
        raise StalesimError(f"slurm_config.partition: expected a partition name, got {part!r}")
    mem = table.get("mem_gb")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, (int, float))
                            or not (0 < mem < 2.0**20)):
        raise StalesimError(f"slurm_config.mem_gb: expected GB per task, a number > 0, got {mem!r}")
    return SlurmConfig(partition=part,
                       time_min=_int(table, "time", 1, MAX_MINUTES, "minutes per task"),
                       gpus=_int(table, "gpus_per_task", 0, MAX_PER_TASK, "GPUs per task"),
                       cpus=_int(table, "cpus_per_task", 1, MAX_PER_TASK, "CPUs per task"),
                       mem_gb=None if mem is None else float(mem),
                       array_parallelism=_int(table, "array_parallelism", 1, MAX_ARRAY_PARALLELISM,
                                              "array tasks at once"),
                       sbatch=_sbatch(table.get("sbatch")))


def load_slurm_config(path: Path) -> SlurmConfig:
    """Read and check ``path`` (TOML); a missing or unparsable file is one line naming it."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise StalesimError(f"slurm_config: cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise StalesimError(f"slurm_config: {path} is not UTF-8 text") from None
    try:
        import tomllib
    except ImportError:  # Python 3.10: the standard library has no TOML reader yet
        raise StalesimError("slurm_config: reading a TOML file needs Python 3.11 or later") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StalesimError(f"slurm_config: {path} is not valid TOML ({str(exc)[:80]})") from None
    except (ValueError, RecursionError):  # an integer past Python's digit limit, or nesting
        raise StalesimError(f"slurm_config: {path} holds a value too long or nested too deeply") from None
    return parse_slurm_config(table)
