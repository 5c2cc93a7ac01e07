"""``stalesim run``: train for real on N ranks (gloo on CPU, NCCL on GPUs).

Same model/data/schedule/optimizer/mitigation flags as ``stalesim emulate``
(they all land in one :class:`TrainConfig`), plus the rank list ``--devices
cpu:N`` or ``--devices cuda:0,1,...`` (alias ``--ranks``); the command spawns
one process per device of the schedule and prints (``--json``) or writes
(``--out``) the measured summary. Under ``torchrun`` (``torchrun ... -m stalesim
run FLAGS``) this process is one rank and nothing is spawned.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import add_threads_arg, nonneg_int, print_json, rendezvous_seconds
from stalesim.cli.train_args import add_schedule_file_arg, add_train_args, train_config_from_args
from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.executor.spec import Job
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import Schedule


def add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", "--ranks", dest="devices", required=False, default=None,
                   help="the ranks: cpu:N (N gloo ranks) or cuda:0,1,... (one NCCL rank per GPU); "
                        "must equal the schedule's device count (S, or --fold D, or P workers)")
    add_threads_arg(p, "per CPU rank")
    p.add_argument("--timeout", type=rendezvous_seconds, default=60.0, metavar="SECONDS",
                   help="seconds a rank may wait on a peer before the run is aborted (at least 1)")
    p.add_argument("--out", default=None, help="run folder (default runs/run-<model>-<schedule>-<time>)")
    p.add_argument("--checkpoint-every", type=nonneg_int, default=0, help="checkpoint every K iterations")
    p.add_argument("--resume", action="store_true", help="resume from the latest checkpoint in --out")
    p.add_argument("--no-eval", action="store_true", help="skip the final test accuracy")
    p.add_argument("--master-addr", default=None, help="rendezvous address (default 127.0.0.1)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="the loss-stage rank writes the per-step loss and step time for TensorBoard into DIR "
                        "while the run trains (pip install stalesim[tensorboard])")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="train for real on N ranks (torch.distributed: gloo/NCCL)",
                       description="Run a schedule's per-device action lists on real processes "
                                   "(one per device), measure time, utilization, memory and loss.")
    add_train_args(p)
    add_schedule_file_arg(p)
    add_executor_args(p)
    p.set_defaults(func=run)


def train_config(args: argparse.Namespace) -> Any:
    """TrainConfig from the parsed flags, through the helper ``emulate`` uses
    (default length: 50 iterations)."""
    if (args.iterations is None and args.epochs is None
            and not str(getattr(args, "schedule_file", None) or "").lower().endswith(".json")):
        args.iterations = 50  # (a JSON schedule file fixes its own length)
    return train_config_from_args(args)


def _default_out(cfg: Any) -> str:
    """A fresh folder under runs/ (created here, exclusively: two runs started in the same second
    never share one)."""
    from stalesim.rundirs import fresh_run_dir, run_dir_name

    return fresh_run_dir("runs", run_dir_name(str(cfg.model), str(cfg.schedule)))


def build_job(args: argparse.Namespace, cfg: TrainConfig, devices: str, sched: Schedule | None = None) -> Job:
    """The job of this run; ``sched``: the schedule :func:`stalesim.executor.spec.job_schedule` built from ``cfg``
    (checked), whose fingerprint the job carries (None: :func:`make_job` checks and plans)."""
    from stalesim.executor.spec import make_job

    out = args.out or _default_out(cfg)
    if args.resume and not args.out:
        raise StalesimError("--resume: needs --out RUN_DIR (the run folder holding the checkpoints)")
    from stalesim.atomic import check_writable_dir

    check_writable_dir(out)  # before the ranks start, not after training
    ck = os.path.join(out, "checkpoints")
    if args.resume and not (os.path.isdir(ck) and any(n[:1] == "k" for n in os.listdir(ck))):
        raise StalesimError(f"--resume: no checkpoint in {ck}")
    job = make_job(cfg, out=out, checkpoint_every=args.checkpoint_every,
                   resume=out if args.resume else None, evaluate=not args.no_eval, schedule=sched,
                   **_tensorboard(args, devices))
    job.update({"devices": devices, "timeout_s": args.timeout, "threads": args.threads})
    return job


def _tensorboard(args: argparse.Namespace, devices: str) -> dict[str, Any]:
    """``--tensorboard DIR`` for the job (TensorBoard checked installed first): the losses are
    read from a GPU as often as the emulator reads them there (a read waits for the device)."""
    from stalesim.cli.launch_args import tensorboard_dir

    folder = tensorboard_dir(args)
    if folder is None:
        return {}
    from stalesim.emulator.engine import READ_EVERY_CUDA

    return {"tensorboard": str(folder), "tensorboard_every": READ_EVERY_CUDA if devices.startswith("cuda") else 1}


def under_torchrun() -> bool:
    """torchrun's elastic agent sets TORCHELASTIC_RUN_ID for every rank it starts."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID"))


def run(args: argparse.Namespace) -> int:
    from stalesim.devices import parse_devices
    from stalesim.executor.launch import run_local

    if under_torchrun():
        return torchrun_rank(args)
    from stalesim.runtime.build import check_own_code

    cfg = train_config(args).check_runnable()
    check_own_code(cfg)  # the user's --model/--dataset, imported and checked before any rank starts
    if args.devices is None:
        raise StalesimError("--devices: required (cpu:N or cuda:0,1,...)")
    if args.master_addr is not None:  # resolved now, before the run folder or any rank
        from stalesim.rendezvous import check_master_addr

        check_master_addr(args.master_addr)
    devs = parse_devices(args.devices)
    from stalesim.runtime.preflight import preflight

    # every rank loads the data set; the model is split over the ranks
    preflight(cfg, what=f"run of {cfg.model} at batch size {cfg.batch_size} on {devs.count} ranks",
              data_copies=devs.count, device=f"cuda:{devs.ids[0]}" if devs.kind == "cuda" else "cpu",
              split=devs.count)
    from stalesim.executor.spec import expected_devices, job_schedule

    sched = job_schedule(cfg)  # built once: the job carries its fingerprint, every rank verifies it
    need = expected_devices(cfg, sched)
    if devs.count != need:
        raise StalesimError(
            f"--devices: {args.devices} gives {devs.count} ranks but schedule {cfg.schedule!r} with "
            f"{cfg.num_stages} stage(s) and {cfg.workers} worker(s) needs {need}")
    if devs.kind == "cuda":
        _check_cuda(devs)
    if args.out is None and not args.resume:
        args.out = _default_out(cfg)
    with _out_lock(args.out):  # one writer per run folder (docs/failure.md)
        job = build_job(args, cfg, str(devs), sched)
        summary = run_local(job, devs, timeout_s=args.timeout, threads=args.threads,
                            master_addr=args.master_addr)
    if args.json:
        print_json(summary)
    else:
        _print_text(summary)
    return 0


def _out_lock(out: str | None) -> Any:
    import contextlib

    from stalesim.outlock import folder_lock

    return folder_lock(out) if out else contextlib.nullcontext()


def _check_cuda(devs: Any) -> None:
    import torch

    n = torch.cuda.device_count()
    bad = [i for i in devs.ids if i >= n]
    if bad:
        raise StalesimError(f"--devices: GPU {bad[0]} requested but {n} CUDA device(s) are visible")


def _print_text(s: dict[str, Any]) -> None:
    util = ", ".join(f"{d}: {u:.0%}" for d, u in s["utilization"].items())
    mem = ", ".join(f"{d}: {b / 2**20:.1f} MiB" for d, b in s["peak_memory_bytes"].items())
    acc = s.get("final_test_accuracy")
    loss = "n/a" if s.get("final_loss") is None else f"{s['final_loss']:.4f}"
    extra = f", test accuracy {acc:.4f}" if acc is not None else ""
    if s.get("final_val_loss") is not None:
        extra = f", validation {s['final_val_loss']:.4f} nats = {s['final_val_bpc']:.4f} bits/char"
    print(f"{s['schedule']} on {s['devices']} {s['device_kind']} rank(s): {s['iterations']} iterations, "
          f"final loss {loss}" + extra
          + (f" DIVERGED at step {s['diverged_at']}" if s.get("diverged") else ""))
    print(f"iteration {s['iteration_time_s'] * 1e3:.2f} ms, {s['throughput_samples_per_s']:.1f} samples/s")
    print(f"utilization {util}; peak memory {mem}")
    print(f"staleness {s['staleness_measured']} (IR {s['staleness_ir']}), versions match IR: {s['versions_match_ir']}")
    if s.get("run_dir"):
        print(f"run folder: {s['run_dir']}")


def torchrun_rank(args: argparse.Namespace) -> int:
    """``torchrun ... -m stalesim run FLAGS``: this process is one rank; no spawning."""
    from stalesim.executor.spec import expected_devices, job_schedule

    cfg = train_config(args).check()
    sched = job_schedule(cfg)  # every rank builds it here; the job's fingerprint is then checked in run_job
    world = int(os.environ.get("WORLD_SIZE", "1"))
    need = expected_devices(cfg, sched)
    if world != need:
        raise StalesimError(f"WORLD_SIZE={world} but schedule {cfg.schedule!r} needs {need} ranks")
    kind = "cuda" if (args.devices or "cpu").startswith("cuda") else "cpu"
    if args.out is None:
        args.out = _default_out(cfg)
    job = build_job(args, cfg, kind, sched)
    from stalesim.executor.worker import worker_main

    ids = None
    if kind == "cuda" and args.devices and ":" in args.devices:
        from stalesim.devices import parse_devices

        ids = list(parse_devices(args.devices).ids)
    spec = {"jobs": [job], "devices": {"kind": kind, "ids": ids}, "timeout_s": args.timeout,
            "threads": args.threads, "workdir": None, "print_json": args.json}
    return worker_main(spec)
