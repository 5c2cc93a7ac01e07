"""Running the ``stalesim`` command line in-process, for the CLI tests."""

from __future__ import annotations

from typing import Any

from stalesim.cli import main


def run_cli(capsys: Any, argv: list[str]) -> tuple[int | str | None, str, str]:
    """(exit status, stdout, stderr) of ``stalesim ARGV``; argparse's own usage errors
    (``SystemExit``) come back as their status, like a stalesim error's 2."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        return exc.code, "", capsys.readouterr().err
    cap = capsys.readouterr()
    return rc, cap.out, cap.err
