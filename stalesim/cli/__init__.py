"""Command-line entry point.

Each sub-command lives in its own module under :mod:`stalesim.cli` and exposes
``register(subparsers)``, which adds a parser whose ``func`` default is called
with the parsed arguments and returns an exit status. Keeping one module per
command lets features land independently, and keeps start-up cheap: torch is
only imported by the commands that need it.

Errors: :class:`~stalesim.errors.StalesimError` (and argparse's own usage
errors) become a one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from stalesim.errors import StalesimError

# name -> module; a module missing here means that feature has not landed yet.
COMMAND_MODULES: tuple[str, ...] = (
    "stalesim.cli.schedule_cmd",
    "stalesim.cli.profile_cmd",
    "stalesim.cli.partition_cmd",
    "stalesim.cli.calibrate_cmd",
    "stalesim.cli.simulate_cmd",
    "stalesim.cli.sweep_cmd",
    "stalesim.cli.emulate_cmd",
    "stalesim.cli.study_cmd",
    "stalesim.cli.run_cmd",
    "stalesim.cli.validate_cmd",
    "stalesim.cli.plan_cmd",
    "stalesim.cli.figures_cmd",
    "stalesim.cli.demo_cmd",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line with exit status 2, with the same
    ``stalesim: error:`` prefix as every other error (the sub-command is named in
    the message, so the line says where the mistake is)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        cmd = self.prog.split()[1:] if self.prog.startswith("stalesim") else []
        where = f"{' '.join(cmd)}: " if cmd else ""
        self.exit(2, f"stalesim: error: {where}{message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stalesim",
        description="Predict, emulate and run pipelined training with stale weights.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for modname in COMMAND_MODULES:
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname:
                continue  # feature not present in this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except StalesimError as exc:
        print(f"stalesim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stalesim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) closed the pipe: stop quietly, as Unix tools do
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
