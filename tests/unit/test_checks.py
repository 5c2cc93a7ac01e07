"""The reliability checks (lab.checks): the probe's cases are real commands and the children
import the same stalesim. Running them is the checks' own job (minutes each; their items are
regression tests elsewhere: tests/test_cli_*.py, tests/integration/test_executor_reliability.py)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import stalesim
from lab.checks import probe_inputs, soak_run
from stalesim.cli import build_parser


def _subcommands() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_probe_cases_are_real_subcommands() -> None:
    known = _subcommands()
    got = probe_inputs.cases("/w")
    assert len(got) > 40
    for want, args in got:
        assert want in ("ok", "err"), args
        if args.startswith("sh:"):  # a shell line: every %STALESIM% is followed by a sub-command
            words = shlex.split(args[3:].replace(";", " ; "))
            named = [words[i + 1] for i, w in enumerate(words) if w == "%STALESIM%"]
            assert named and all(n in known for n in named), args
        else:
            assert shlex.split(args)[0] in known, args


def test_children_import_this_stalesim() -> None:
    """The checks put the folder holding the package on the children's path: the one this
    process imported, so a checkout is checked, not whatever stalesim is installed."""
    assert Path(stalesim.__file__).resolve().parents[1] == soak_run.ROOT
