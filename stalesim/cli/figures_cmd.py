"""``stalesim figures``: regenerate every figure of the reproduction (CSV + PNG each)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "figures", help="regenerate the reproduction figures (CSV + PNG each)",
        description="Write every figure with the CSV behind it: simulator figures (staleness table, "
                    "predicted speed-ups, memory, Pipe-SGD timing) and accuracy figures read from stored "
                    "study tables (docs/results/ only: your own runs/ never change them). The shape profiles "
                    "they read are stored inputs (stalesim/data/shape_profiles/), not written to OUT.")
    p.add_argument("--out", default="figures", help="output folder (default figures)")
    p.add_argument("--only", default=None, help="comma-separated figure names (see --list)")
    p.add_argument("--list", action="store_true", help="list the figures and exit")
    p.add_argument("--refresh-profiles", action="store_true",
                   help="re-measure the stored shape profiles in stalesim/data/shape_profiles/ "
                        "(FLOPs and bytes; about a minute)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stalesim.figures import FIGURES, make_figures

    if args.list:
        for name, (_, what, data) in FIGURES.items():
            print(f"{name}: {what} [{data}]")
        return 0
    names = None
    if args.only is not None:  # an empty --only is a mistake, not "everything"
        from stalesim.errors import StalesimError

        names = [n.strip() for n in args.only.split(",")]
        if not all(names):
            raise StalesimError(f"--only: expected comma-separated figure names, got {args.only!r} "
                                f"(known: {', '.join(FIGURES)})")
    make_figures(args.out, names, refresh_profiles=args.refresh_profiles)
    return 0
