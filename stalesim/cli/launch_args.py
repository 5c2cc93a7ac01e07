"""Launcher flags of the commands that run many independent jobs (``study``, ``plan``'s
emulations, ``sweep``): where the jobs run (:mod:`stalesim.launch`), a Slurm config file
the ``--slurm-*`` flags override, and where TensorBoard scalars go."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeVar

from stalesim.cli.common import float_type, int_type
from stalesim.launch.jobs import LAUNCHERS, LOCAL, RAY, SLURM, LaunchSpec
from stalesim.launch.slurm_config import MAX_MINUTES, MAX_PER_TASK, SlurmConfig, load_slurm_config

T = TypeVar("T")
D = TypeVar("D")

# the values of a Slurm task when neither a flag nor --slurm-config sets them
_DEFAULT_MINUTES = 60
_DEFAULT_GPUS = 0


def add_launcher_args(p: argparse.ArgumentParser, *, tensorboard: bool = True) -> None:
    """The launcher flags; ``tensorboard``: also ``--tensorboard DIR`` (commands whose jobs train)."""
    g = p.add_argument_group("launcher (where the jobs run)")
    g.add_argument("--launcher", choices=LAUNCHERS, default=LOCAL,
                   help="local: --jobs processes here (default); slurm: a Slurm job array through submitit "
                        "(pip install stalesim[slurm]); ray: Ray tasks (pip install stalesim[ray])")
    g.add_argument("--local", action="store_true",
                   help="with --launcher slurm: submitit's local executor (subprocesses here, no cluster)")
    g.add_argument("--slurm-partition", default=None, metavar="NAME", help="Slurm partition of the tasks")
    g.add_argument("--slurm-time", type=int_type(1, MAX_MINUTES), default=None, metavar="MIN",
                   help=f"time limit per task in minutes (default {_DEFAULT_MINUTES}; a task past it is requeued "
                        "and continues from its checkpoint)")
    g.add_argument("--slurm-gpus", type=int_type(0, MAX_PER_TASK), default=None, metavar="N",
                   help=f"GPUs per task (slurm; also Ray's num_gpus per task; default {_DEFAULT_GPUS})")
    g.add_argument("--slurm-cpus", type=int_type(1, MAX_PER_TASK), default=None, metavar="N",
                   help="CPUs per task (default --threads)")
    g.add_argument("--slurm-mem", type=float_type(0.0, 2.0**20, lo_open=True), default=None, metavar="GB",
                   help="memory per task in GB (default: the partition's)")
    g.add_argument("--slurm-config", default=None, metavar="FILE.toml",
                   help="Slurm settings in a TOML file (partition, time, gpus_per_task, cpus_per_task, mem_gb, "
                        "array_parallelism, an [sbatch] table of further options); the flags override it")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --launcher ray: a running cluster ('auto' on its nodes, or ray://HOST:10001); "
                        "default: a local Ray instance of --jobs x --threads CPUs")
    if tensorboard:
        add_tensorboard_arg(p)


def add_tensorboard_arg(p: argparse.ArgumentParser, *, live: bool = False) -> None:
    """``--tensorboard DIR``: a study's runs each under DIR/<schedule>/S<stages>/<mitigation>/seed<seed>
    when they finish, or (``live``: one run, ``emulate``) the run's own scalars in DIR as it trains."""
    if live:
        p.add_argument("--tensorboard", default=None, metavar="DIR",
                       help="write the run's scalars (loss, learning rate, step time, epoch metrics, measured "
                            "staleness) for TensorBoard into DIR while it trains, flushed at each read of the "
                            "losses (pip install stalesim[tensorboard])")
        return
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="write each run's scalars (loss, learning rate, step time, epoch metrics, measured "
                        "staleness) for TensorBoard under DIR/<schedule>/S<stages>/<mitigation>/seed<seed> "
                        "(pip install stalesim[tensorboard])")


def _first(flag: T | None, from_file: T | None, default: D) -> T | D:
    """The flag's value, else the config file's, else the default."""
    return flag if flag is not None else from_file if from_file is not None else default


def launch_spec_from_args(args: argparse.Namespace, device: str | None = None) -> LaunchSpec:
    """The launcher the flags (over ``--slurm-config``) ask for, checked (flags of another
    launcher, a missing extra: one-line errors) before anything runs. ``device``: where the
    jobs train (default ``--device``; ``None`` and no ``--device``: the CPU)."""
    from stalesim.errors import StalesimError

    slurm_given = args.slurm_partition is not None or args.slurm_gpus is not None or \
        args.slurm_cpus is not None or args.slurm_mem is not None or args.slurm_time is not None
    if slurm_given and args.launcher == LOCAL:
        raise StalesimError("launcher: --slurm-* flags are for --launcher slurm (or ray: --slurm-gpus)")
    if args.slurm_config is not None and args.launcher != SLURM:
        raise StalesimError("slurm_config: --slurm-config is for --launcher slurm")
    conf = load_slurm_config(Path(args.slurm_config)) if args.slurm_config is not None else SlurmConfig()
    gpus = _first(args.slurm_gpus, conf.gpus, _DEFAULT_GPUS)
    device = device if device is not None else str(getattr(args, "device", "cpu"))
    # a task on a cluster's node sees only the GPUs it asked for: none, unless --slurm-gpus
    if device.startswith("cuda") and not gpus and \
            ((args.launcher == SLURM and not args.local) or (args.launcher == RAY and args.ray_address)):
        raise StalesimError("slurm_gpus: --device cuda on a cluster needs GPUs per task: --slurm-gpus 1")
    return LaunchSpec(launcher=args.launcher, local=args.local,
                      slurm_partition=args.slurm_partition or conf.partition,
                      slurm_time_min=_first(args.slurm_time, conf.time_min, _DEFAULT_MINUTES),
                      slurm_gpus=gpus, slurm_cpus=_first(args.slurm_cpus, conf.cpus, None),
                      slurm_mem_gb=_first(args.slurm_mem, conf.mem_gb, None),
                      slurm_array_parallelism=conf.array_parallelism, slurm_sbatch=conf.sbatch,
                      ray_address=args.ray_address).check()


def refuse_launcher_flags(args: argparse.Namespace, why: str) -> None:
    """One line when a launcher flag is given where nothing is launched (``why``)."""
    from stalesim.errors import StalesimError

    given = [f for f in ("local", "slurm_partition", "slurm_time", "slurm_gpus", "slurm_cpus", "slurm_mem",
                         "slurm_config", "ray_address", "tensorboard") if getattr(args, f, None) not in (None, False)]
    if args.launcher != LOCAL:
        given.insert(0, "launcher")
    if given:
        raise StalesimError(f"{given[0]}: --{given[0].replace('_', '-')} does not apply to {why}")


def tensorboard_dir(args: argparse.Namespace) -> Path | None:
    """``--tensorboard DIR``, after checking that TensorBoard is installed."""
    if args.tensorboard is None:
        return None
    from stalesim.launch.tb_scalars import check_available

    check_available()
    return Path(args.tensorboard)
