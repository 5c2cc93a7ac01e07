"""``stalesim study``: a grid of emulations with a mean ± std table and a plot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import add_threads_arg, int_type, positive_float, print_json
from stalesim.cli.launch_args import add_launcher_args, launch_spec_from_args, tensorboard_dir
from stalesim.cli.train_args import add_train_args, train_config_from_args
from stalesim.limits import MAX_COUNT, MAX_JOBS

if TYPE_CHECKING:
    from stalesim.runtime.config import TrainConfig


def _csv(text: str) -> list[str]:
    items = [p.strip() for p in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text!r} (an empty item)")
    return items


def _ints(text: str) -> list[int]:
    try:
        return [int(p) for p in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "study", help="grid of emulations (schedule x placement x mitigation x seed)",
        description="Run emulations over a grid in parallel processes and write results.jsonl, "
                    "table.csv, table.md (mean ± std over seeds) and accuracy_vs_staleness.png.")
    add_train_args(p)
    add_threads_arg(p, "per parallel process (--jobs)")
    p.add_argument("--schedules", type=_csv, default=["sequential", "stale"],
                   help="comma-separated schedules (default sequential,stale)")
    p.add_argument("--placements", default=None,
                   help="';'-separated PPVs or stage counts, e.g. '2;1,2;1,2,3,4' or 'S2;S4' (default S2)")
    p.add_argument("--depths", default=None,
                   help="depth scaling: comma-separated stage counts, e.g. 1,2,4,8,16,32 (the model split "
                        "into that many stages; instead of --placements)")
    p.add_argument("--target-loss", type=positive_float, default=None,
                   help="also count iterations to this training loss per row and the slowdown against "
                        "S = 1 (depth.csv, depth.md, slowdown_vs_stages.png)")
    p.add_argument("--target-smooth", type=int_type(1, MAX_COUNT), default=20,
                   help="with --target-loss: the loss is the mean of the last N iterations (default 20)")
    p.add_argument("--mitigations", type=_csv, default=["none"],
                   help="comma-separated: none, weight-prediction, spike-compensation, pipemare, "
                        "pipemare-lr, pipemare-correction, staleness-lr, nesterov-lookahead, "
                        "nesterov-lookahead-constant, error-feedback, basis-rotation")
    p.add_argument("--seeds", type=_ints, default=[0, 1, 2], help="comma-separated seeds")
    p.add_argument("--jobs", type=int_type(1, MAX_JOBS), default=2,
                   help="parallel processes (with --batched: batches at a time)")
    p.add_argument("--batched", action="store_true",
                   help="train the grid points that share model shape, schedule and partition together, "
                        "as one batched emulation (runs differ in seeds and mitigations)")
    p.add_argument("--batch-runs", type=int_type(1, MAX_COUNT), default=None,
                   help="with --batched: at most this many runs per batch (default: all that can)")
    p.add_argument("--resume", action="store_true",
                   help="continue unfinished runs (or batches) of --out from their checkpoints "
                        "(finished runs with the same config are always kept)")
    p.add_argument("--checkpoint-every", type=int_type(1, MAX_COUNT), default=None,
                   help="checkpoint each run (or batch) every K steps (and at every epoch end)")
    p.add_argument("--out", required=True, help="study folder")
    p.add_argument("--json", action="store_true", help="print the aggregated table as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_launcher_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from stalesim.outlock import folder_lock

    _check_study_flags(args)
    # where the jobs run, checked (a missing extra is one line) before the grid is built
    args.launch_spec, args.tensorboard_dir = launch_spec_from_args(args), tensorboard_dir(args)
    # -M is for the grid's micro-batch schedules (expand() gives the others whole batches)
    micro, args.microbatches = args.microbatches, 1
    base = replace(train_config_from_args(args), microbatches=micro)
    from stalesim.runtime.build import check_own_code

    # the user's --model/--dataset imported and checked here, once, before the grid's processes
    # start (they inherit this process's sys.path, where the modules were found)
    check_own_code(base)
    out = Path(args.out)
    points, mit_of = _grid(args, base)
    with folder_lock(out):  # held from the first write (study.json) to the table
        rows, fig, extra = _run_grid(args, base, points, mit_of, out)
    if args.json:
        print_json(rows)
    else:
        print((out / "table.md").read_text(), end="")
        if extra:
            print((out / "depth.md").read_text(), end="")
        print(f"wrote {out}/table.csv, table.md, {fig.name}, results.jsonl" + "".join(f", {e}" for e in extra))
    return 0


def _check_study_flags(args: argparse.Namespace) -> None:
    from stalesim.errors import StalesimError

    if args.ppv is not None or args.stages is not None:
        raise StalesimError("placements: use --placements for a study, not --ppv/--stages")
    if args.batch_runs is not None and not args.batched:
        raise StalesimError("batch_runs: --batch-runs sets the size of batches; it needs --batched")
    if args.depths is not None and args.placements is not None:
        raise StalesimError("depths: give --depths or --placements, not both")


def _grid(args: argparse.Namespace, base: TrainConfig) -> tuple[list[tuple[str, TrainConfig]], dict[str, str]]:
    """The grid's (run id, config) points, each once, and each run's mitigation (``none`` for
    a schedule whose staleness does not depend on the placement)."""
    from stalesim.emulator.study import expand, parse_placements
    from stalesim.schedule import get_spec

    if args.depths is not None:
        from stalesim.plan.depth import depth_placements, parse_depths

        places = depth_placements(parse_depths(args.depths))
    else:
        places = parse_placements(args.placements or "S2")
    points: list[tuple[str, TrainConfig]] = []
    mit_of: dict[str, str] = {}
    for mit in args.mitigations:
        for rid, cfg in expand(base, args.schedules, places, [mit], args.seeds):
            if rid not in mit_of:
                points.append((rid, cfg))
                mit_of[rid] = "none" if get_spec(cfg.schedule).placement_free else mit
    return points, mit_of


def _run_grid(args: argparse.Namespace, base: TrainConfig, points: list[tuple[str, TrainConfig]],
              mit_of: dict[str, str], out: Path) -> tuple[list[dict[str, Any]], Path, list[str]]:
    """Write study.json, run the grid, write the table and plot (and, with --target-loss, the
    depth table and slowdown plot); the rows, the plot and the extra files' names."""
    from stalesim.cli.common import write_json_atomic
    from stalesim.emulator.study import aggregate, plot, run_study, write_table

    write_json_atomic(out / "study.json", {"base": base.to_dict(), "schedules": args.schedules,
                                           "placements": args.placements, "depths": args.depths,
                                           "target_loss": args.target_loss,
                                           "target_smooth": args.target_smooth,
                                           "mitigations": args.mitigations, "seeds": args.seeds,
                                           "batched": args.batched, "batch_runs": args.batch_runs,
                                           "runs": [rid for rid, _ in points]})
    results = run_study(points, out, jobs=args.jobs, progress=False if args.quiet else None,
                        mitigation_of=mit_of, batched=args.batched, batch_runs=args.batch_runs,
                        continue_runs=args.resume, checkpoint_every=args.checkpoint_every or 0,
                        threads=args.threads, launcher=args.launch_spec, tensorboard=args.tensorboard_dir)
    rows = aggregate(results)
    write_table(rows, out)
    fig = plot(rows, out)
    extra: list[str] = []
    if args.target_loss is not None:
        from stalesim.plan.convergence import Target
        from stalesim.plan.depth import depth_rows, plot_slowdown, write_depth_table

        target = Target("loss", args.target_loss, args.target_smooth)
        drows = depth_rows(results, target)
        extra = [p.name for p in write_depth_table(drows, target, out)]
        extra.append(plot_slowdown(drows, out / "slowdown_vs_stages.png",
                                   title=f"{base.model}\n{target.describe()}").name)
    return rows, fig, extra
