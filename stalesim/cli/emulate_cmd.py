"""``stalesim emulate``: train with exactly a schedule's staleness on one device."""

from __future__ import annotations

import argparse

from stalesim.cli.common import add_threads_arg, apply_threads, nonneg_int, print_json
from stalesim.cli.launch_args import add_tensorboard_arg, tensorboard_dir
from stalesim.cli.train_args import add_schedule_file_arg, add_train_args, train_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "emulate", help="train on one device with exactly a schedule's weight staleness",
        description="Replay a schedule's global order on one device with real data and model: "
                    "every forward/backward reads exactly the weight version the IR's version "
                    "table gives. Writes a run folder with --out.")
    add_train_args(p)
    add_schedule_file_arg(p)
    add_threads_arg(p)
    p.add_argument("--out", default=None, help="run folder: config.json, metrics.jsonl, "
                   "versions.jsonl, summary.json, checkpoint.pt")
    p.add_argument("--checkpoint-every", type=nonneg_int, default=0,
                   help="also checkpoint every K steps (with --out; epochs always checkpoint)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_tensorboard_arg(p, live=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import contextlib

    from stalesim.emulator.replay import emulate
    from stalesim.outlock import folder_lock
    from stalesim.runtime.preflight import preflight

    cfg = train_config_from_args(args)
    tb = tensorboard_dir(args)  # TensorBoard installed, checked before the run
    preflight(cfg, what=f"emulating {cfg.model} at batch size {cfg.batch_size}")  # before any allocation
    apply_threads(args.threads)
    with folder_lock(args.out) if args.out else contextlib.nullcontext():  # one writer per folder
        summary = emulate(cfg, out=args.out, checkpoint_every=args.checkpoint_every,
                          progress=False if args.quiet else None, resume=args.resume,
                          tensorboard=tb)
    if args.json:
        print_json(summary)
        return 0
    loss = summary["final_loss"]
    acc = summary["final_test_accuracy"]

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    metric = (f"val_loss={fmt(summary.get('final_val_loss'))} val_bpc={fmt(summary.get('final_val_bpc'))}"
              if summary.get("task") == "lm" else f"test_accuracy={fmt(acc)}")
    print(f"{summary['schedule']} {summary['model']}/{summary['dataset']} S={summary['stages']} "
          f"ppv={summary['ppv']} staleness={summary['staleness_ir']}")
    print(f"steps={summary['steps_done']}/{summary['iterations']} final_loss="
          f"{fmt(loss)} {metric} wall={summary['wall_time_s']:.1f}s"
          + (f" DIVERGED at step {summary['diverged_at']}" if summary["diverged"] else ""))
    print(f"data: {summary['data_note']}; versions match the IR table: {summary['versions_match_ir']}")
    return 0
