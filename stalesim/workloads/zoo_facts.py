"""What the model zoo holds, known without building a model (no torch import).

Flags are checked before anything expensive starts (docs/failure.md): "16 stages of
LeNet-5" or ``resnet1000000`` must be refused in milliseconds, not after torch has
been imported and a model with half a million blocks built. :func:`model_facts`
answers from the zoo's structure alone; ``tests/unit/test_workloads_zoo_facts.py``
checks every answer against the built model, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stalesim.errors import StalesimError
from stalesim.workloads.names import BASE_NAME, gpt_name, is_gpt_name, parse_gpt_name

__all__ = ["MAX_CLASSES", "MAX_RESNET_DEPTH", "ModelFacts", "model_facts", "model_names"]

# He et al.'s deepest CIFAR ResNet (section 4.2): 600 blocks. Deeper ones take minutes
# to build and train one step on the machines this tool targets.
MAX_RESNET_DEPTH = 1202
# classes of a classifier head (ImageNet-21k has 21,841)
MAX_CLASSES = 1 << 16
_RESNET_RE = re.compile(r"^resnet(\d+)$")


@dataclass(frozen=True)
class ModelFacts:
    """A zoo model's partitionable shape: ``blocks`` (what a stage holds),
    ``weight_layers`` (conv/linear layers, the PPV numbering; one per block for the
    GPT) and its data set."""

    name: str
    blocks: int
    weight_layers: int
    default_dataset: str
    input_shape: tuple[int, ...]


_FIXED = {
    "lenet5": ModelFacts("lenet5", 5, 5, "mnist", (1, 28, 28)),
    "alexnet": ModelFacts("alexnet", 8, 8, "cifar10", (3, 32, 32)),
    "vgg16": ModelFacts("vgg16", 16, 16, "cifar10", (3, 32, 32)),
}


# the ResNet depths of He et al. (and two deeper ones) listed by ``model_names``
RESNET_DEPTHS = (20, 32, 44, 56, 110, 224, 362)
# The ImageNet ResNets' names (He et al. Table 1, torchvision). In this field "resnet50" means the
# 25.6 M-parameter bottleneck net; 50 and 152 are also 6n+2, so the zoo would silently build a
# 0.76 M-parameter CIFAR net under that name. Refused, all five, with the depths the zoo builds.
IMAGENET_RESNET_DEPTHS = (18, 34, 50, 101, 152)
_COLLIDING = tuple(d for d in IMAGENET_RESNET_DEPTHS if (d - 2) % 6 == 0)  # 50, 152


def model_names() -> list[str]:
    """Names ``build_model`` accepts (any ``resnet<6n+2>`` and ``gpt-char:<options>`` work
    too; these are listed)."""
    return list(_FIXED) + [f"resnet{d}" for d in RESNET_DEPTHS] + [BASE_NAME]


def model_facts(name: str) -> ModelFacts | None:
    """The facts of zoo model ``name`` (case and surrounding spaces ignored), None for a
    name the zoo does not know (the caller may supply its own module). A ``resnet<d>``
    name with a depth the zoo cannot build raises :class:`StalesimError`."""
    key = str(name).strip().lower()
    if key in _FIXED:
        return _FIXED[key]
    if is_gpt_name(key):  # embedding, n_layer transformer blocks, head: one PPV unit each
        g = parse_gpt_name(key)
        return ModelFacts(gpt_name(g), g.n_layer + 2, g.n_layer + 2, "shakespeare", (g.block_size,))
    m = _RESNET_RE.match(key)
    if not m:
        return None
    digits = m.group(1)
    depth = int(digits[-12:])  # (a longer number is deeper than allowed either way)
    if len(digits) <= 12 and depth in IMAGENET_RESNET_DEPTHS:
        raise StalesimError(
            f"model {name!r}: the zoo has no ImageNet ResNet-{depth}; its ResNets are CIFAR ResNets "
            f"(He et al. section 4.2, depth 6n+2): {', '.join(f'resnet{d}' for d in RESNET_DEPTHS)}, "
            f"or any other resnet<6n+2> but {' and '.join(f'resnet{d}' for d in _COLLIDING)} "
            "(the ImageNet names)")
    if len(digits) > 12:
        depth = 6 * MAX_RESNET_DEPTH + 2
    elif depth < 8 or (depth - 2) % 6 != 0:
        raise StalesimError(
            f"model {name!r}: CIFAR ResNet depth must be 6n+2 with n >= 1 "
            f"(e.g. 20, 32, 44, 56, 110), got {digits}")
    if depth > MAX_RESNET_DEPTH:
        raise StalesimError(
            f"model {name!r}: depth {digits} is deeper than this tool builds "
            f"(at most resnet{MAX_RESNET_DEPTH}, the deepest of He et al.)")
    n = (depth - 2) // 6
    return ModelFacts(f"resnet{depth}", 3 * n + 2, depth, "cifar10", (3, 32, 32))
