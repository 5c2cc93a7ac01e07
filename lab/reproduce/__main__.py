"""``python -m lab.reproduce tables --check|--write``, ``... gpu``, ``... schedules``, ``... lm-staleness``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.reproduce import lm_staleness, schedules
from stalesim.cli.common import int_type
from stalesim.errors import StalesimError
from stalesim.limits import MAX_JOBS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.reproduce", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables", help="check or regenerate docs/RESULTS.md's tables from stored artifacts")
    g = t.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 1 with a diff when a table differs")
    g.add_argument("--write", action="store_true", help="regenerate the tables in place")
    t.add_argument("--results-md", default="docs/RESULTS.md")
    r = sub.add_parser("gpu", help="the paper's CIFAR-10 experiments on one GPU (+ the 2-GPU table), resumable")
    r.add_argument("--out", default="runs/reproduce-gpu", help="work folder (run folders, checkpoints)")
    r.add_argument("--results", default="docs/results/gpu_cifar10", help="where the small artifacts go")
    r.add_argument("--results-md", default="docs/RESULTS.md", help="whose GPU tables to regenerate")
    r.add_argument("--gpu", default=None, help="GPU class for the estimate (catalog key, e.g. h100-sxm); "
                                               "default: from the device name and memory; "
                                               "required to plan (--dry-run) without a GPU")
    r.add_argument("--jobs", type=int_type(1, MAX_JOBS), default=None,
                   help="runs of each one-GPU study at a time (default: as many as the GPU's free "
                        "memory and the CPU cores allow)")
    r.add_argument("--data-dir", default=None, help="dataset root (default $STALESIM_DATA)")
    r.add_argument("--dry-run", action="store_true", help="print the plan and the time estimate only")
    r.add_argument("--smoke", action="store_true", help="CPU pipeline check: 2 iterations, synthetic data")
    sc = sub.add_parser("schedules", help="predict every schedule on a catalog GPU pair (a docs/results folder)")
    schedules.add_arguments(sc)
    lm = sub.add_parser("lm-staleness", help="print the char-GPT staleness table from its stored study tables")
    lm.add_argument("folder", nargs="?", default=str(lm_staleness.DEFAULT))
    args = p.parse_args(argv)
    try:
        if args.cmd == "schedules":
            return schedules.run(args)
        if args.cmd == "lm-staleness":
            print(lm_staleness.table(Path(args.folder)), end="")
            return 0
        if args.cmd == "tables":
            from lab.reproduce.tables import check, write

            md = Path(args.results_md)
            if args.check:
                diffs = check(md, Path("."))
                print("\n".join(diffs) if diffs else f"{md}: every table equals its artifacts")
                return 1 if diffs else 0
            print(f"{md}: {'regenerated' if write(md, Path('.')) else 'unchanged'}")
            return 0
        from lab.reproduce.gpu import PAPER, SMOKE, reproduce
        from stalesim.runtime.datapaths import pin_data_env

        reproduce(Path(args.out), Path(args.results), scale=SMOKE if args.smoke else PAPER, device_class=args.gpu,
                  data_dir=args.data_dir or pin_data_env(), dry_run=args.dry_run,
                  results_md=Path(args.results_md), jobs=args.jobs)
        return 0
    except StalesimError as exc:
        print(f"stalesim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
