"""LayeredModel: an ``nn.Sequential`` of partitionable blocks with the metadata PPVs need.

Its own module so that the zoo and the model definitions it registers (e.g.
:mod:`stalesim.workloads.gpt`) both build on it without importing each other.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.names import GPTConfig

_WEIGHT_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def count_weight_layers(module: nn.Module) -> int:
    """Number of conv/linear layers inside ``module`` (itself included)."""
    return sum(1 for m in module.modules() if isinstance(m, _WEIGHT_TYPES))


def _child_key(name: str, index: int) -> str:
    """A valid, unique ``nn.Module`` child name derived from a block name."""
    key = re.sub(r"[^0-9A-Za-z_]", "_", name) or f"block{index}"
    return key


class LayeredModel(nn.Sequential):
    """An ``nn.Sequential`` of partitionable blocks plus the metadata PPVs need.

    Attributes: ``name``, ``blocks`` (the child modules, in order),
    ``block_names``, ``weight_layers`` (conv/linear count per block),
    ``input_shape`` (per-sample shape: (C, H, W) for images, (T,) for token
    sequences), ``default_dataset``, ``input_dtype`` (None: floating, follows the
    weights; ``torch.long`` for token ids), ``label_shape`` (per-sample label
    shape: () for a class, (T,) for next-token targets) and ``task``
    (``"classify"`` or ``"lm"``, see :mod:`stalesim.runtime.tasks`).
    """

    # Set by the builder of a token-id model (:func:`stalesim.workloads.gpt.build_gpt`), absent
    # otherwise: the number of token ids, and that GPT's configuration. Declared so that setting
    # them is typed (``nn.Module.__setattr__`` takes only tensors and modules).
    vocab_size: int
    gpt_config: GPTConfig

    def __init__(
        self,
        blocks: Sequence[tuple[str, nn.Module]],
        *,
        name: str,
        input_shape: tuple[int, ...],
        default_dataset: str = "cifar10",
        weight_layers: Sequence[int] | None = None,
        input_dtype: torch.dtype | None = None,
        label_shape: tuple[int, ...] = (),
        task: str = "classify",
    ) -> None:
        if len(blocks) == 0:
            raise StalesimError(f"model {name!r}: needs at least one block")
        od: OrderedDict[str, nn.Module] = OrderedDict()
        for i, (bname, module) in enumerate(blocks):
            if not isinstance(module, nn.Module):
                raise StalesimError(
                    f"model {name!r}: block {i} ({bname!r}) is not an nn.Module "
                    f"but {type(module).__name__}"
                )
            key = _child_key(bname, i)
            if key in od:
                key = f"{key}_{i}"
            od[key] = module
        super().__init__(od)
        self.name: str = name
        self.block_names: list[str] = [b for b, _ in blocks]
        if weight_layers is None:
            wl = [count_weight_layers(m) for _, m in blocks]
        else:
            wl = [int(w) for w in weight_layers]
            if len(wl) != len(blocks) or any(w < 0 for w in wl):
                raise StalesimError(
                    f"model {name!r}: weight_layers must have one integer >= 0 per block "
                    f"({len(blocks)} blocks), got {list(weight_layers)}"
                )
        self.weight_layers: list[int] = wl
        if len(input_shape) < 1 or any(int(d) < 1 for d in input_shape):
            raise StalesimError(
                f"model {name!r}: input_shape must be a per-sample shape such as (C, H, W), "
                f"got {input_shape}")
        self.input_shape: tuple[int, ...] = tuple(int(d) for d in input_shape)
        self.default_dataset: str = default_dataset
        self.input_dtype: torch.dtype | None = input_dtype
        self.label_shape: tuple[int, ...] = tuple(int(d) for d in label_shape)
        if task not in ("classify", "lm"):
            raise StalesimError(f"model {name!r}: task must be 'classify' or 'lm', got {task!r}")
        self.task: str = task
        self._block_flops: list[int] | None = None  # cache for default_ppv

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.children())

    @property
    def total_weight_layers(self) -> int:
        return sum(self.weight_layers)

    @classmethod
    def from_sequential(
        cls,
        seq: nn.Sequential | Sequence[nn.Module],
        *,
        name: str,
        input_shape: tuple[int, ...],
        default_dataset: str = "cifar10",
        block_names: Sequence[str] | None = None,
    ) -> LayeredModel:
        """Bring your own model: each child of ``seq`` (or list item) becomes one block.

        The children are the split points: a pipeline cut can fall between any two
        of them and nowhere else, so group a residual block (or a conv with its
        activation) into one child to keep it together. A child without a
        conv/linear layer (e.g. a lone ReLU) counts 0 weight layers and travels
        with the weight layer before it when a PPV is applied.
        """
        if isinstance(seq, nn.Sequential):
            items = list(seq.named_children())
        else:
            items = [(str(i), m) for i, m in enumerate(seq)]
        if block_names is not None:
            if len(block_names) != len(items):
                raise StalesimError(
                    f"block_names: expected {len(items)} names, got {len(block_names)}"
                )
            items = [(n, m) for n, (_, m) in zip(block_names, items)]
        else:
            items = [(n if not n.isdigit() else f"block{n}", m) for n, m in items]
        return cls(items, name=name, input_shape=input_shape, default_dataset=default_dataset)

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """Zeros of the input's shape: float32 (cast to the weights' dtype before use) or
        ``input_dtype`` (token ids)."""
        return torch.zeros((batch_size, *self.input_shape), dtype=self.input_dtype or torch.float32)

    def random_input(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """A random input batch (normal floats, or uniform token ids below ``vocab_size``)."""
        if self.input_dtype is not None and not self.input_dtype.is_floating_point:
            high = int(getattr(self, "vocab_size", 2))
            return torch.randint(0, high, (batch_size, *self.input_shape), generator=generator,
                                 dtype=self.input_dtype)
        return torch.randn((batch_size, *self.input_shape), generator=generator)

    def random_batch(self, batch_size: int, generator: torch.Generator,
                     dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """A random (input, labels) batch shaped as this model reads it, on the CPU: the
        one place a model's example data is made, so that everything that drives a zoo
        model without a data set (profiler, co-runners, memory and hook probes) feeds token
        ids to a language model and images of ``dtype`` to the others.

        Inputs come from :meth:`random_input` (images cast to ``dtype``; token ids keep
        ``input_dtype``), then labels of ``label_shape`` per sample (a class, or next-token
        targets) below the model's output width, both from ``generator`` in that order.
        """
        x = self.random_input(batch_size, generator)
        if x.is_floating_point():
            x = x.to(dtype)
        y = torch.randint(0, self.output_width(), (batch_size, *self.label_shape), generator=generator)
        return x, y

    def output_width(self) -> int:
        """Classes (or vocabulary) of the model's output: the last dimension of one forward.

        Run in eval mode and without gradients on the weights' device and dtype, so asking
        does not move batch-norm statistics or draw random numbers.
        """
        param = next(self.parameters(), None)
        x = self.example_input(1)
        if param is not None:
            x = x.to(device=param.device, dtype=param.dtype if x.is_floating_point() else x.dtype)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return int(self(x).shape[-1])
        finally:
            self.train(was_training)

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, blocks={len(self.block_names)}, "
            f"weight_layers={self.total_weight_layers}, input_shape={self.input_shape}"
        )


# --------------------------------------------------------------------- LeNet-5
