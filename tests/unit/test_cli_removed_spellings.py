"""Flag spellings renamed before the first release are refused, not kept as hidden aliases.

Each old spelling is given where it was once accepted, with the rest of a command line
that would otherwise parse: argparse refuses it in one line, exit 2, naming the flag; the
current spelling of the same flag parses.
"""

from __future__ import annotations

import pytest

from stalesim.cli import build_parser, main

PROF = "p.json"
# (command, old spelling, its current spelling, where that lands: (attribute, value)); the profile
# is never read: parsing fails (or stops) before any command runs
RENAMED = [
    (["demo"], ["--gpu", "h100-sxm"], ["--target", "h100-sxm"], ("target", "h100-sxm")),
    (["simulate", "--profile", PROF, "--schedule", "stale"], ["--device", "h100-sxm"], ["--target", "h100-sxm"],
     ("target", "h100-sxm")),
    (["sweep", "--profile", PROF, "--schedules", "stale"], ["--devices", "h100-sxm"], ["--targets", "h100-sxm"],
     ("targets", ["h100-sxm"])),
    (["schedule", "stale", "-S", "4"], ["--devices", "2"], ["--fold", "2"], ("fold", 2)),
    (["simulate", "--profile", PROF, "--schedule", "stale", "-S", "4"], ["--devices", "2"], ["--fold", "2"],
     ("fold", 2)),
    (["emulate", "--schedule", "stale", "-S", "4"], ["--devices", "2"], ["--fold", "2"], ("fold", 2)),
    (["study", "--schedules", "stale", "-S", "4", "--out", "o"], ["--devices", "2"], ["--fold", "2"], ("fold", 2)),
    (["emulate", "--schedule", "stale"], ["-N", "3"], ["--iterations", "3"], ("iterations", 3)),
    (["emulate", "--schedule", "stale"], ["--batches", "3"], ["--iterations", "3"], ("iterations", 3)),
    (["study", "--schedules", "stale", "--out", "o"], ["-N", "3"], ["--iterations", "3"], ("iterations", 3)),
    (["run", "--schedule", "stale"], ["--batches", "3"], ["--iterations", "3"], ("iterations", 3)),
]


@pytest.mark.parametrize(("command", "old", "new", "lands"), RENAMED,
                         ids=[" ".join([c[0][0], *c[1]]) for c in RENAMED])
def test_old_spelling_is_refused_and_the_current_one_parses(capsys, command, old, new, lands) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, *old])
    assert exc.value.code == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == f"stalesim: error: unrecognized arguments: {' '.join(old)}\n"
    attr, value = lands
    assert getattr(build_parser().parse_args([*command, *new]), attr) == value


def test_no_hidden_flag_is_an_old_spelling() -> None:
    """A flag left out of --help is an internal one or a default trick, never a second
    spelling of a flag that --help shows (that is what an alias was)."""
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    hidden_twins = []
    for name, p in sub.choices.items():
        shown = {a.dest for a in p._actions if a.help is not argparse.SUPPRESS}
        hidden_twins += [f"{name} {a.option_strings[0]}" for a in p._actions
                         if a.help is argparse.SUPPRESS and a.option_strings and a.dest in shown
                         and a.default is not argparse.SUPPRESS]
    assert hidden_twins == []
