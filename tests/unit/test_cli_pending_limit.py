"""``--pending-limit``: the automatic zero-bubble scheduler's cap on micro-batches waiting for
their weight gradients reaches the LLM estimate from the command line (simulate, plan
--workload), and is refused in one line where it cannot apply."""

from __future__ import annotations

import json

import pytest

from stalesim.cli import main

BASE = ["simulate", "--workload", "llama3.1-8b", "--tp", "1", "--pp", "8", "-P", "1", "--node", "dgx-a100",
        "-B", "64", "--json"]


def _activations(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, int | None]:
    assert main([*BASE, *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    return out["memory_breakdown"]["activations"], out["plan"]["pending_limit"]


def test_the_limit_sets_how_many_records_wait_for_w(capsys: pytest.CaptureFixture[str]) -> None:
    # the first stage's 1F1B count is pp = 8 records; ZB-1p (limit pp) holds that many,
    # ZB-2p (limit 2 pp) twice as many on the heaviest stage: activations scale with the limit
    one, lim1 = _activations(capsys, "--schedule", "zb-h1", "--pending-limit", "8")
    two, lim2 = _activations(capsys, "--schedule", "zb-h2", "--pending-limit", "16")
    assert (lim1, lim2) == (8, 16)
    assert two == pytest.approx(2 * one, rel=1e-9)
    # beyond the micro-batches there is nothing more to hold: min(limit, M), M = 64
    many, _ = _activations(capsys, "--schedule", "zb-h2", "--pending-limit", "64")
    more, _ = _activations(capsys, "--schedule", "zb-h2", "--pending-limit", "1000")
    assert many == more == pytest.approx(8 * one, rel=1e-9)
    hand, none = _activations(capsys, "--schedule", "zb-h1")
    assert none is None and hand != one  # without it, the handcrafted order's own memory


@pytest.mark.parametrize("argv, needle", [
    (["--schedule", "1f1b", "--pending-limit", "8"], "pending_limit: bounds the pending W"),
    (["--schedule", "zb-h1", "--pending-limit", "0"], "--pending-limit"),
])
def test_where_it_cannot_apply_it_is_one_line(argv: list[str], needle: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    try:  # argparse exits; a checked plan returns the CLI's status
        code = main([*BASE, *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
