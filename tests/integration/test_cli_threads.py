"""--threads: one definition shared by every command that trains, default 1 per process."""

from __future__ import annotations

import pytest

from stalesim.cli import build_parser
from stalesim.cli.common import DEFAULT_THREADS, THREADS_HELP


@pytest.mark.parametrize("argv", [["emulate"], ["study", "--out", "x"], ["run"], ["validate", "--out", "x"]])
def test_every_training_command_has_threads(argv):
    p = build_parser()
    assert p.parse_args(argv).threads == DEFAULT_THREADS == 1
    assert p.parse_args([*argv, "--threads", "3"]).threads == 3
    with pytest.raises(SystemExit):
        p.parse_args([*argv, "--threads", "0"])


def test_help_states_the_rule(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["emulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--threads" in text and "default 1" in text
    assert "default 1" in THREADS_HELP


def test_emulate_sets_the_threads(monkeypatch, tmp_path):
    """emulate applies --threads before training (torch's default would be the core count)."""
    import torch

    from stalesim.cli import main

    seen = []
    import stalesim.emulator.replay as replay

    class Stop(Exception):  # stops the command at training; a SystemExit would be reported as the user's
        pass

    def fake(cfg, **kw):
        seen.append(torch.get_num_threads())
        raise Stop

    old = torch.get_num_threads()
    monkeypatch.setattr(replay, "emulate", fake)
    try:
        with pytest.raises(Stop):
            main(["emulate", "--dataset", "synthetic", "--iterations", "1", "--threads", "2"])
    finally:
        torch.set_num_threads(old)
    assert seen == [2]
