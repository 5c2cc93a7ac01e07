"""experiments/cli_types.py: a zoo model name is checked at parse time."""

from __future__ import annotations

import argparse

import pytest

from experiments.cli_types import zoo_model


def test_known_and_parametrized_models_pass_through() -> None:
    assert zoo_model("resnet20") == "resnet20"
    assert zoo_model("gpt-char:n_layer=2,n_embd=32,n_head=2,block_size=16").startswith("gpt-char")


def test_an_unknown_model_is_an_argparse_error_naming_it() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="nosuch"):
        zoo_model("nosuch")
    p = argparse.ArgumentParser()
    p.add_argument("--model", type=zoo_model)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--model", "nosuch"])
    assert e.value.code == 2
