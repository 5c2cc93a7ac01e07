"""Launcher flags of the commands that run many independent jobs (``study``): where the
jobs run (:mod:`stalesim.launch`) and where their TensorBoard scalars go."""

from __future__ import annotations

import argparse
from pathlib import Path

from stalesim.cli.common import float_type, int_type
from stalesim.launch.jobs import LAUNCHERS, LOCAL, RAY, SLURM, LaunchSpec

# a Slurm task of at most a year (Slurm's own limit is "UNLIMITED"; more is a typo)
_MAX_MINUTES = 366 * 24 * 60


def add_launcher_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launcher (where the jobs run)")
    g.add_argument("--launcher", choices=LAUNCHERS, default=LOCAL,
                   help="local: --jobs processes here (default); slurm: a Slurm job array through submitit "
                        "(pip install stalesim[slurm]); ray: Ray tasks (pip install stalesim[ray])")
    g.add_argument("--local", action="store_true",
                   help="with --launcher slurm: submitit's local executor (subprocesses here, no cluster)")
    g.add_argument("--slurm-partition", default=None, metavar="NAME", help="Slurm partition of the tasks")
    g.add_argument("--slurm-time", type=int_type(1, _MAX_MINUTES), default=60, metavar="MIN",
                   help="time limit per task in minutes (default 60; a task past it is requeued and "
                        "continues from its checkpoint)")
    g.add_argument("--slurm-gpus", type=int_type(0, 1024), default=0, metavar="N",
                   help="GPUs per task (slurm; also Ray's num_gpus per task; default 0)")
    g.add_argument("--slurm-cpus", type=int_type(1, 1024), default=None, metavar="N",
                   help="CPUs per task (default --threads)")
    g.add_argument("--slurm-mem", type=float_type(0.0, 2.0**20, lo_open=True), default=None, metavar="GB",
                   help="memory per task in GB (default: the partition's)")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --launcher ray: a running cluster ('auto' on its nodes, or ray://HOST:10001); "
                        "default: a local Ray instance of --jobs x --threads CPUs")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="write each run's scalars (loss, learning rate, step time, epoch metrics, measured "
                        "staleness) for TensorBoard under DIR/<schedule>/S<stages>/<mitigation>/seed<seed> "
                        "(pip install stalesim[tensorboard])")


def launch_spec_from_args(args: argparse.Namespace) -> LaunchSpec:
    """The launcher the flags ask for, checked (flags of another launcher, a missing extra:
    one-line errors) before anything runs."""
    slurm_given = args.slurm_partition is not None or args.slurm_gpus or args.slurm_cpus is not None \
        or args.slurm_mem is not None or args.slurm_time != 60
    from stalesim.errors import StalesimError

    if slurm_given and args.launcher == LOCAL:
        raise StalesimError("launcher: --slurm-* flags are for --launcher slurm (or ray: --slurm-gpus)")
    # a task on a cluster's node sees only the GPUs it asked for: none, unless --slurm-gpus
    if str(getattr(args, "device", "cpu")).startswith("cuda") and not args.slurm_gpus and \
            ((args.launcher == SLURM and not args.local) or (args.launcher == RAY and args.ray_address)):
        raise StalesimError("slurm_gpus: --device cuda on a cluster needs GPUs per task: --slurm-gpus 1")
    return LaunchSpec(launcher=args.launcher, local=args.local, slurm_partition=args.slurm_partition,
                      slurm_time_min=args.slurm_time, slurm_gpus=args.slurm_gpus, slurm_cpus=args.slurm_cpus,
                      slurm_mem_gb=args.slurm_mem, ray_address=args.ray_address).check()


def tensorboard_dir(args: argparse.Namespace) -> Path | None:
    """``--tensorboard DIR``, after checking that TensorBoard is installed."""
    if args.tensorboard is None:
        return None
    from stalesim.launch.tb_scalars import check_available

    check_available()
    return Path(args.tensorboard)
