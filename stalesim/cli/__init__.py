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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

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

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """argparse ignores a failed write of ``--help``/``--version`` and exits 0; a help text
        that never reached a full device or a closed pipe is a failure: one line, status 2."""
        if not message:
            return
        out = file if file is not None else sys.stderr
        try:
            out.write(message)
            flush = getattr(out, "flush", None)  # argparse passes sys.stdout/stderr; any writer may come
            if flush is not None:
                flush()
        except BrokenPipeError:
            _detach_stdout()  # the reader closed the pipe: quiet, as main() does
            raise SystemExit(141) from None
        except (OSError, ValueError) as exc:
            _detach_stdout()
            reason = getattr(exc, "strerror", None) or str(exc)
            print(f"stalesim: error: cannot write the output (stdout): {reason}", file=sys.stderr)
            raise SystemExit(2) from None


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


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit cannot fail again
    (and print ``Exception ignored ...``) after we reported the failure once."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    from stalesim.cli.common import hold_standard_streams
    from stalesim.runtime.datapaths import pin_data_env

    hold_standard_streams()  # a closed stdout must not be taken by the first file a command opens
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        pin_data_env()  # a relative $STALESIM_DATA names a folder of the starting directory
        try:
            status = int(args.func(args) or 0)
        except SystemExit as exc:  # a user's plug-in that called sys.exit() is its error, not our exit
            from stalesim.plugins import user_exit

            said = user_exit(exc)
            if said is None:
                raise
            print(f"stalesim: error: {said}", file=sys.stderr)
            return 2
        sys.stdout.flush()  # a full device or closed pipe on stdout fails here, not at exit
        return status
    except StalesimError as exc:
        print(f"stalesim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stalesim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) closed the pipe: stop quietly, as Unix tools do
        _detach_stdout()
        return 141
    except OSError as exc:
        # a write that failed outside the atomic writer: stdout on a full device
        # (`> /dev/full`), or a file a library wrote itself
        from stalesim.atomic import os_reason

        if exc.filename is not None:
            where = str(exc.filename)
        else:  # the atomic writer names its files, so an unnamed write error is (almost always) stdout
            where = "cannot write the output (stdout)"
            _detach_stdout()
        print(f"stalesim: error: {where}: {os_reason(exc)}", file=sys.stderr)
        return 2
