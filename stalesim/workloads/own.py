"""Your own model: ``--model pkg.module:factory`` -> a :class:`LayeredModel`.

The factory is called with no arguments and returns

* an ``nn.Sequential``: each child is one block (a pipeline cut falls between children
  and nowhere else; group a residual block into one child), or
* a list (or tuple) of ``nn.Module`` blocks, the same in list form, or
* a :class:`LayeredModel` (``LayeredModel.from_sequential(seq, name=..., input_shape=...)``),
  used as it is.

The per-sample input shape (``(C, H, W)`` for images) is the returned object's
``input_shape`` attribute when it has one (a LayeredModel always has; set
``seq.input_shape = (1, 28, 28)`` on a Sequential), else the data set's (``--dataset``).
The factory runs under ``torch.manual_seed(seed)`` inside a forked RNG, so every process
(the emulator, each rank of the executor) builds the same initial weights, and the caller's
random stream is left as it was. Its own initialisation is kept (the zoo's He init is not
applied). The model is a classifier: its output is ``(batch, classes)`` logits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.plugins import call_factory, first_line
from stalesim.workloads.layered import LayeredModel

FLAG = "--model"


def build_own_model(spec: str, *, seed: int | None = 0,
                    input_shape: tuple[int, ...] | None = None) -> LayeredModel:
    """The LayeredModel ``spec``'s factory builds (see the module doc); one-line errors."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        built = call_factory(spec, FLAG)
    return as_layered(built, spec, input_shape)


def as_layered(built: Any, spec: str, input_shape: tuple[int, ...] | None = None) -> LayeredModel:
    """``built`` (a factory's result) as a LayeredModel named ``spec``."""
    if isinstance(built, LayeredModel):
        return built
    if isinstance(built, nn.Sequential):
        blocks: Any = built
    elif isinstance(built, (list, tuple)) and built and all(isinstance(m, nn.Module) for m in built):
        blocks = list(built)
    else:
        raise StalesimError(f"{FLAG}: {spec}() returned {_what(built)}; expected an nn.Sequential, a "
                            "non-empty list of nn.Module blocks, or a stalesim LayeredModel")
    shape = getattr(built, "input_shape", None) or input_shape
    if shape is None:
        raise StalesimError(f"{FLAG}: {spec}() returned blocks ({type(built).__name__}) without an input shape: "
                            "set its input_shape attribute (e.g. seq.input_shape = (1, 28, 28)), return "
                            "LayeredModel.from_sequential(..., input_shape=...), or give --dataset")
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise StalesimError(f"{FLAG}: {spec}: input_shape must be a tuple of integers such as "
                            f"(1, 28, 28), got {shape!r}") from None
    return LayeredModel.from_sequential(blocks, name=spec, input_shape=shape,
                                        default_dataset="synthetic")


def check_own_model(model: LayeredModel, spec: str) -> int:
    """One forward of a two-sample example batch (eval mode, no gradient): the model reads
    its input shape and gives ``(batch, classes)`` logits. Returns the number of classes;
    a mismatch is one line naming ``--model`` before any run starts."""
    try:
        x = model.example_input(2)
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model(x)
        finally:
            model.train(was)
    except Exception as exc:  # noqa: BLE001 - the user's forward failed on its own input shape
        raise StalesimError(f"{FLAG}: {spec}: a forward of an input of shape {tuple(x.shape)} failed: "
                            f"{type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise StalesimError(f"{FLAG}: {spec}: expected (batch, classes) logits from a batch of 2, got {got}")
    return int(out.shape[1])


def _what(obj: Any) -> str:
    if isinstance(obj, nn.Module):
        return f"an {type(obj).__name__} that is not an nn.Sequential (list its blocks instead)"
    return f"a {type(obj).__name__}"
