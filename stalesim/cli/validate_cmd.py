"""``stalesim validate``: predicted vs measured on this machine's devices.

Profiles the model as the ranks run it, calibrates the link, simulates every
schedule, runs each on the executor, emulates a few iterations, and writes
``report.md``, ``summary.json``, figures and traces into ``--out``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from stalesim.cli.common import (
    add_threads_arg,
    int_list,
    nonneg_int,
    positive_int,
    print_json,
    rendezvous_seconds,
    seed_int,
)

if TYPE_CHECKING:
    from stalesim.validate.config import ValidateConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate", help="profile, calibrate, run, simulate and compare (report with figures)",
        description="Predict each schedule with the simulator (profile measured on these devices, "
                    "calibrated link) and run it for real on the executor; report predicted vs "
                    "measured iteration time, utilization, speed-up and memory, and emulated vs "
                    "executed loss.")
    p.add_argument("--model", default="lenet5",
                   help="zoo model (lenet5, resnet20, gpt-char:..., ...) or your own as "
                        "pkg.module:factory (docs/api.md)")
    p.add_argument("--devices", default="cpu:2", help="cpu:N (gloo ranks) or cuda:0,1,... (NCCL)")
    p.add_argument("--schedules", default="all", help="comma list of schedules, or all")
    p.add_argument("--iterations", type=positive_int, default=40, help="mini-batches per run")
    p.add_argument("--batch-size", type=positive_int, default=64, help="global mini-batch size")
    p.add_argument("--microbatches", type=positive_int, default=4,
                   help="micro-batches per mini-batch, used by every micro-batched schedule "
                        "(gpipe, 1f1b, 2bw, the interleaved and zero-bubble ones)")
    add_threads_arg(p, "per CPU rank")
    p.add_argument("--dataset", default="synthetic",
                   help="synthetic | mnist | fashion-mnist | cifar10, or your own as pkg.module:factory")
    p.add_argument("--data-dir", default=None, help="data root (default $STALESIM_DATA)")
    p.add_argument("--ppv", type=int_list, default=None, help="partition (default: min-max over the profile)")
    p.add_argument("--emulate-iterations", type=nonneg_int, default=10,
                   help="iterations the emulator runs per schedule for the loss check (0: skip)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="measured runs per schedule, interleaved round-robin with the 1-rank baseline; "
                        "the prediction is compared with their median and the report gives each "
                        "schedule's noise floor (IQR / median) (default 3)")
    p.add_argument("--profile-repeats", type=positive_int, default=5,
                   help="timed rounds of the per-layer profile (default 5)")
    p.add_argument("--hardware", default=None, metavar="HW.json",
                   help="reuse a calibration (stalesim calibrate -o HW.json) instead of measuring")
    p.add_argument("--profile", default=None, metavar="P.json",
                   help="reuse a profile (same device, --threads) instead of measuring one")
    p.add_argument("--contended-profile", default=None, metavar="P.json",
                   help="reuse the profile measured with the other ranks busy")
    p.add_argument("--no-contention", action="store_true",
                   help="do not profile with the other ranks busy (CPU)")
    p.add_argument("--no-overhead", action="store_true", help="do not add the per-action runtime overhead")
    p.add_argument("--timeout", type=rendezvous_seconds, default=120.0,
                   help="per-operation deadline of the ranks (at least 1 s)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--out", required=True, help="output folder (report.md, summary.json, figures/)")
    p.add_argument("--resume", action="store_true",
                   help="continue the validation in --out from its finished rounds (same options): "
                        "runs only the rounds still missing, then predicts and compares")
    p.add_argument("--json", action="store_true", help="print summary.json's content")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="write each schedule's measured iteration time per round (as each round finishes), "
                        "then its prediction and errors, for TensorBoard under DIR/<schedule>/ "
                        "(pip install stalesim[tensorboard])")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> ValidateConfig:
    from stalesim.errors import StalesimError
    from stalesim.validate.config import ValidateConfig

    if args.emulate_iterations < 0:
        raise StalesimError(f"--emulate-iterations: expected >= 0, got {args.emulate_iterations}")
    return ValidateConfig(
        model=args.model, devices=args.devices, schedules=[args.schedules], iterations=args.iterations,
        batch_size=args.batch_size, microbatches=args.microbatches, threads=args.threads,
        dataset=args.dataset, data_dir=args.data_dir, ppv=args.ppv, out=args.out,
        emulate_iterations=args.emulate_iterations, seed=args.seed, repeats=args.repeats,
        profile_repeats=args.profile_repeats,
        hardware=args.hardware, profile=args.profile, contended_profile=args.contended_profile,
        contention=not args.no_contention, overhead=not args.no_overhead,
        timeout_s=args.timeout,
        resume=args.resume,
        command="stalesim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["validate"]
        else "stalesim validate",
    )


def run(args: argparse.Namespace) -> int:
    from stalesim.atomic import check_writable_dir
    from stalesim.cli.launch_args import tensorboard_dir
    from stalesim.outlock import folder_lock
    from stalesim.validate.config import check_config
    from stalesim.validate.workflow import validate

    cfg = config_from_args(args)
    check_config(cfg)  # one-line errors before anything is measured
    tensorboard = tensorboard_dir(args)
    from stalesim.runtime.preflight import check_memory, estimate_model

    # the emulation it compares with trains the whole model (SGD with momentum) in this process
    check_memory(estimate_model(cfg.model, batch_size=cfg.batch_size, element_size=4, optimizer_copies=1),
                 f"validating {cfg.model} at batch size {cfg.batch_size}")
    # the sub-folders it writes must be folders (or absent) before 20 s of measuring
    check_writable_dir(cfg.out, subdirs=("traces", "figures", "runs", "checkpoint"))
    with folder_lock(cfg.out):  # one writer per output folder
        summary = validate(cfg, progress=(lambda m: None) if args.quiet else None, tensorboard=tensorboard)
    if args.json:
        print_json(summary)
        return 0
    print(summary_table(summary))
    print(f"report: {cfg.out}/report.md")
    return 0


def summary_table(summary: dict[str, Any]) -> str:
    """The per-schedule comparison as aligned text, then the one-line summary (with the
    busy-machine warning when there is one)."""
    from stalesim.cli.common import fmt_or_na as f
    from stalesim.validate.report import busy_line

    head = ("schedule", "pred ms", "meas ms", "noise", "error", "replay", "util p/m", "speed-up p/m",
            "mem err", "loss diff")
    lines = [head]
    for r in summary["rows"]:
        pit, mit = r["predicted_iteration_time_s"], r["measured_iteration_time_s"]
        lines.append((
            r["schedule"], f(None if pit is None else pit * 1e3, ".2f"),
            f(None if mit is None else mit * 1e3, ".2f"), f(r.get("noise_floor"), ".1%"),
            f(r["time_error"], "+.1%") + (" ≈" if r.get("time_error_within_noise") else ""),
            f(r.get("replay_time_error"), "+.1%"),
            f"{f(r['predicted_utilization_mean'], '.2f')}/{f(r['measured_utilization_mean'], '.2f')}",
            f"{f(r['predicted_speedup'], '.2f')}/{f(r['measured_speedup'], '.2f')}",
            f(r.get("memory_error"), "+.1%"), f(r["max_loss_rel_diff"], ".1e")))
    w = [max(len(row[i]) for row in lines) for i in range(len(head))]
    text = "\n".join("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(row))
                     for row in lines)
    tail = (f"median |time error| {f(summary.get('median_abs_time_error'), '.1%')}, "
            f"max {f(summary.get('max_abs_time_error'), '.1%')}; noise floor median "
            f"{f(summary.get('median_noise_floor'), '.1%')} over {summary.get('config', {}).get('repeats')} "
            f"repeat(s) (≈: error within noise); "
            + (f"prediction noise median {f(summary.get('median_prediction_noise'), '.1%')} over the timing "
               f"passes; " if summary.get("median_prediction_noise") is not None else "")
            + (f"a perfect model would show {noise['median']:.1%} / {noise['max']:.1%} at this noise; "
               if (noise := summary.get("noise_only_error")) else "")
            + f"load average {summary.get('load_average', {}).get('before')}")
    warning = busy_line(summary)
    if warning:
        tail += f"; {warning}"
    terms = summary.get("goal_terms") or {}
    if terms:  # the largest term of each missed goal, so the one-line summary names it too
        tail += "\nmissed goals' terms: " + "; ".join(
            f"{g} {e['term']} {e['toward_error_ms']:+.2f} ms/iteration"
            + (f" ({e['term_error']:+.1%})" if e.get("term_error") is not None else "")
            for g, e in terms.items())
    return text + "\n" + tail
