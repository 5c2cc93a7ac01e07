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
        return fence_blocks(built, spec)
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
    return fence_blocks(LayeredModel.from_sequential(blocks, name=spec, input_shape=shape,
                                                     default_dataset="synthetic"), spec)


class BlockOutputCheck:
    """Forward hook on one of the user's blocks: what it returns is what the next block, the
    stage boundary (sent to the next rank, its gradient sent back) and the loss take, so a
    tuple, None, an integer tensor, or logits of another batch size are the user's error, named
    here in one line (:data:`FLAG`, the factory, the block) wherever the block runs (the check
    forward, the emulator, a rank of the executor, the profiler), instead of a torch error from
    inside stalesim later. A block that returns the wrong thing only for some batch sizes is
    caught at the batch that shows it. A class, not a closure: a model is deep-copied per worker."""

    def __init__(self, spec: str, block: str, last: bool) -> None:
        self.spec, self.block, self.last = spec, block, last

    def __call__(self, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        where = f"{FLAG}: {self.spec}: block {self.block!r}"
        if not isinstance(out, torch.Tensor):
            raise StalesimError(f"{where} returned {_what(out)}; a block must return one tensor "
                                "(the next block's input, or the logits)")
        if not (out.is_floating_point() or out.is_complex()):
            raise StalesimError(f"{where} returned a {out.dtype} tensor; a block's output must be floating "
                                "point (gradients flow back through it)")
        x = args[0] if args else None
        if self.last and (out.dim() != 2 or (isinstance(x, torch.Tensor) and x.dim() > 0
                                             and out.shape[0] != x.shape[0])):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else "?"
            raise StalesimError(f"{where} (the last) returned shape {tuple(out.shape)} from an input of shape "
                                f"{got}; expected (batch, classes) logits, one row per sample")


class UserBlockError(StalesimError):
    """A user's block raised in its forward; ``cause`` is what it raised."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


class _Fenced:
    """The forward of a fenced block (mixed in before the block's own class, see :func:`fence_blocks`):
    an exception the user's forward raises becomes one :class:`UserBlockError` naming the factory
    and the block (the user's traceback behind ``STALESIM_DEBUG``). A ``sys.exit()`` in it is left
    to :func:`stalesim.plugins.user_exit`, which names the file and line."""

    _stalesim_fence: tuple[str, str]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().forward(*args, **kwargs)  # type: ignore[misc]
        except StalesimError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code failed: one line naming it
            from stalesim.plugins import debug_traceback

            debug_traceback(exc)
            spec, block = self._stalesim_fence
            raise UserBlockError(f"{FLAG}: {spec}: block {block!r} raised {type(exc).__name__}: "
                                 f"{first_line(exc)}", exc) from None


_FENCED_CLASSES: dict[type, type] = {}


def _fenced_class(cls: type) -> type:
    """``cls`` with :class:`_Fenced`'s forward first (one class per block class; as
    ``torch.nn.utils.parametrize`` gives a module a generated subclass, so its parameters, their
    names and ``isinstance`` stay as they were)."""
    if issubclass(cls, _Fenced):
        return cls
    if cls not in _FENCED_CLASSES:
        _FENCED_CLASSES[cls] = type(cls.__name__, (_Fenced, cls), {"__module__": cls.__module__})
    return _FENCED_CLASSES[cls]


def fence_blocks(model: LayeredModel, spec: str) -> LayeredModel:
    """``model`` with each of its blocks fenced (once): a :class:`BlockOutputCheck` on what it
    returns, and :class:`_Fenced`'s forward around what it raises."""
    blocks = model.blocks
    for i, (name, block) in enumerate(zip(model.block_names, blocks)):
        if not any(isinstance(h, BlockOutputCheck) for h in block._forward_hooks.values()):
            last = i == len(blocks) - 1 and model.task == "classify"  # a LayeredModel may be a language model
            block.register_forward_hook(BlockOutputCheck(spec, name, last))
        # a plain attribute beside the parameters (nn.Module's __setattr__ types it as one of them)
        object.__setattr__(block, "_stalesim_fence", (spec, name))
        block.__class__ = _fenced_class(type(block))
    return model


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
    except UserBlockError as exc:  # the user's forward failed on its own input shape
        raise StalesimError(f"{FLAG}: {spec}: a forward of an input of shape {tuple(x.shape)} failed: "
                            f"{type(exc.cause).__name__}: {first_line(exc.cause)}") from None
    except StalesimError:  # a block's output refused by its BlockOutputCheck: already one line
        raise
    except Exception as exc:  # noqa: BLE001 - the user's forward failed on its own input shape
        raise StalesimError(f"{FLAG}: {spec}: a forward of an input of shape {tuple(x.shape)} failed: "
                            f"{type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise StalesimError(f"{FLAG}: {spec}: expected (batch, classes) logits from a batch of 2, got {got}")
    if not out.is_floating_point():
        raise StalesimError(f"{FLAG}: {spec}: expected floating-point logits, got {out.dtype}")
    return int(out.shape[1])


def _what(obj: Any) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, nn.Module):
        return f"an {type(obj).__name__} that is not an nn.Sequential (list its blocks instead)"
    return f"a {type(obj).__name__}"
