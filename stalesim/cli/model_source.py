"""Where ``simulate`` and ``partition`` get their per-layer costs: a stored profile, or a model.

``--profile PROFILE.json`` (what ``stalesim profile`` wrote) or ``--model NAME`` (a zoo
name or your own ``pkg.module:factory``, with ``--dataset`` for its input shape): the model
is profiled here, on this machine's CPU, at the command's batch size, with a few quick
rounds (for a prediction worth keeping, run ``stalesim profile`` once and pass the file).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stalesim.errors import StalesimError

# rounds of the profile taken on the fly (``stalesim profile`` defaults to 5 after 2)
QUICK_REPEATS = 3
QUICK_WARMUP = 1
DEFAULT_BATCH = 32


def add_model_source_args(p: argparse.ArgumentParser) -> None:
    """``--model``/``--dataset``: profile a model here instead of reading ``--profile``."""
    p.add_argument("--model", default=None, metavar="NAME",
                   help="instead of --profile: profile this model here (CPU, quick rounds): a zoo "
                        "name or your own as pkg.module:factory (docs/api.md)")
    p.add_argument("--dataset", default=None,
                   help="with --model: the data set that gives your own model's input shape")


def load_costs(args: argparse.Namespace, batch_size: int | None) -> Any:
    """The Profile of ``--profile`` or of ``--model`` (one of them, never both)."""
    from stalesim.workloads.profile import load_profile

    if args.model is not None and args.profile is not None:
        raise StalesimError("--model: give a stored --profile or a --model to profile here, not both")
    if args.model is None:
        if args.dataset is not None:
            raise StalesimError("--dataset: only with --model (a profile holds its model's shape)")
        if args.profile is None:
            raise StalesimError("--profile: required (or --model NAME to profile one here)")
        return load_profile(args.profile)
    return profile_here(args.model, args.dataset, batch_size or DEFAULT_BATCH)


def profile_here(model: str, dataset: str | None, batch_size: int) -> Any:
    """A quick CPU profile of zoo model or ``pkg.module:factory`` ``model`` at ``batch_size``."""
    from stalesim.plugins import is_plugin
    from stalesim.progress import heartbeat
    from stalesim.workloads.profiler import profile_model
    from stalesim.workloads.zoo_facts import model_facts, model_names

    net: Any = model
    if is_plugin(model):
        from stalesim.runtime.build import own_model

        net = own_model(model, dataset)
    elif model_facts(model) is None:
        raise StalesimError(f"--model: unknown {model!r} (known: {', '.join(model_names())}, or your own "
                            "as pkg.module:factory)")
    print(f"profiling {model} here at batch size {batch_size} ({QUICK_REPEATS} rounds on the CPU; "
          "`stalesim profile` stores a profile to reuse)", file=sys.stderr)
    with heartbeat(f"profiling {model}"):
        return profile_model(net, [batch_size], device="cpu", threads=1, repeats=QUICK_REPEATS,
                             warmup=QUICK_WARMUP)
