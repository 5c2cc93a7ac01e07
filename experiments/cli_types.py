"""argparse types the experiments share beyond :mod:`stalesim.cli.common`'s: a zoo model
named on the command line is checked when the arguments are parsed, so a typo is one
``error:`` line with exit status 2, not a traceback from the process that builds it."""

from __future__ import annotations

import argparse

from stalesim.errors import StalesimError


def zoo_model(text: str) -> str:
    """argparse type: a model the zoo can build (``resnet20``, ``gpt-char:n_layer=2,...``)."""
    from stalesim.workloads.zoo import model_factory

    try:
        model_factory(text)
    except StalesimError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
