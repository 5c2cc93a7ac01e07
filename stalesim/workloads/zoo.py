"""Model zoo: CNNs as ordered lists of partitionable blocks.

A pipeline partition may only cut *between* blocks, so every model here is a
:class:`LayeredModel`, an ``nn.Sequential`` whose children are the blocks. A
block holds one weight layer (conv/linear) together with the activation, norm
and pooling that follow it, or one whole residual block (two weight layers and
its shortcut), which is indivisible. ``weight_layers`` records how many
conv/linear layers each block has, which is what the stale-weights paper's
pipeline placement vectors (PPVs) count.

Models: ``lenet5`` (MNIST), ``alexnet`` and ``vgg16`` (CIFAR-10 forms whose
parameter counts match the weight memory in Zhang & Abdelrahman's Table 9:
88.9 MiB and 58.2 MiB), and CIFAR ResNets ``resnet<6n+2>`` (He et al. 2016,
section 4.2, option-A shortcuts), e.g. resnet20/32/44/56/110/224/362 (the ImageNet
names resnet18/34/50/101/152 are refused: see zoo_facts.IMAGENET_RESNET_DEPTHS).
Dropout is left out on purpose: its RNG stream would differ between the
emulator (one process) and the executor (one process per stage), and the
product promises identical losses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from stalesim.errors import StalesimError
from stalesim.workloads.layered import LayeredModel, count_weight_layers  # re-exported
from stalesim.workloads.names import model_task  # re-export: torch-free name -> task

__all__ = [
    "BasicBlock",
    "LayeredModel",
    "build_model",
    "count_weight_layers",
    "model_names",
    "model_task",
]

def _lenet5(num_classes: int) -> LayeredModel:
    blocks = [
        ("conv1", nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2))),
        ("conv2", nn.Sequential(nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))),
        ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU())),
        ("fc2", nn.Sequential(nn.Linear(120, 84), nn.ReLU())),
        ("fc3", nn.Sequential(nn.Linear(84, num_classes))),
    ]
    return LayeredModel(blocks, name="lenet5", input_shape=(1, 28, 28), default_dataset="mnist")


# --------------------------------------------------------------------- AlexNet
def _alexnet(num_classes: int) -> LayeredModel:
    """CIFAR-10 AlexNet: 5 conv + 3 fc, 23.3 M parameters (88.9 MiB as in the paper)."""

    def conv(cin: int, cout: int, pool: bool, stride: int = 1) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU()]
        if pool:
            layers.append(nn.MaxPool2d(2))
        return nn.Sequential(*layers)

    blocks = [
        ("conv1", conv(3, 64, True, stride=2)),  # 32 -> 16 -> 8
        ("conv2", conv(64, 192, True)),  # 8 -> 4
        ("conv3", conv(192, 384, False)),
        ("conv4", conv(384, 256, False)),
        ("conv5", conv(256, 256, True)),  # 4 -> 2
        ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(256 * 2 * 2, 4096), nn.ReLU())),
        ("fc2", nn.Sequential(nn.Linear(4096, 4096), nn.ReLU())),
        ("fc3", nn.Sequential(nn.Linear(4096, num_classes))),
    ]
    return LayeredModel(blocks, name="alexnet", input_shape=(3, 32, 32), default_dataset="cifar10")


# ---------------------------------------------------------------------- VGG-16
_VGG16_CFG: list[int | str] = [
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
]


def _vgg16(num_classes: int) -> LayeredModel:
    """CIFAR-10 VGG-16: 13 conv+BN+ReLU (pools ride with the conv before them) + 3 fc."""
    blocks: list[tuple[str, nn.Module]] = []
    cin = 3
    idx = 0
    for item in _VGG16_CFG:
        if item == "M":
            _, last = blocks[-1]
            assert isinstance(last, nn.Sequential)
            last.append(nn.MaxPool2d(2))
            continue
        idx += 1
        cout = int(item)
        blocks.append(
            (f"conv{idx}", nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                                          nn.BatchNorm2d(cout), nn.ReLU()))
        )
        cin = cout
    blocks += [
        ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(512, 512), nn.ReLU())),
        ("fc2", nn.Sequential(nn.Linear(512, 512), nn.ReLU())),
        ("fc3", nn.Sequential(nn.Linear(512, num_classes))),
    ]
    return LayeredModel(blocks, name="vgg16", input_shape=(3, 32, 32), default_dataset="cifar10")


# ---------------------------------------------------------------------- ResNet
class BasicBlock(nn.Module):
    """CIFAR basic block: two 3x3 conv+BN, option-A (parameter-free) shortcut.

    Option A subsamples the input by 2 and zero-pads the new channels, so the
    block has exactly two weight layers, as PPV counting for ResNet-20..362
    in the stale-weights paper requires (6n+2 weight layers in total).
    """

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride = stride
        self.pad = cout - cin

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            half = self.pad // 2
            x = F.pad(x, (0, 0, 0, 0, half, self.pad - half))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def _resnet(depth: int, num_classes: int) -> LayeredModel:
    n = (depth - 2) // 6
    blocks: list[tuple[str, nn.Module]] = [
        ("stem", nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                               nn.ReLU()))
    ]
    cin = 16
    for g, cout in enumerate((16, 32, 64), start=1):
        for b in range(n):
            stride = 2 if (g > 1 and b == 0) else 1
            blocks.append((f"g{g}b{b}", BasicBlock(cin, cout, stride)))
            cin = cout
    blocks.append(
        ("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)))
    )
    return LayeredModel(blocks, name=f"resnet{depth}", input_shape=(3, 32, 32),
                        default_dataset="cifar10")


# -------------------------------------------------------------------- registry
_FIXED: dict[str, Callable[[int], LayeredModel]] = {
    "lenet5": _lenet5,
    "alexnet": _alexnet,
    "vgg16": _vgg16,
}


def model_names() -> list[str]:
    """Names ``build_model`` accepts (any ``resnet<6n+2>`` and ``gpt-char:<options>`` work
    too; these are listed)."""
    from stalesim.workloads.zoo_facts import model_names as names

    return names()


def _init_weights(model: nn.Module) -> None:
    """He init for convs (as He et al.), PyTorch defaults elsewhere, BN to (1, 0)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def model_factory(name: str) -> Callable[[int], LayeredModel]:
    """The builder of zoo model ``name`` (num_classes -> model), without building it: an
    unknown name or a bad ResNet depth is one line, before anything is loaded or built."""
    key = str(name).strip().lower()
    factory: Callable[[int], LayeredModel] | None = _FIXED.get(key)
    from stalesim.workloads.gpt import build_gpt, is_gpt_name, parse_gpt_name

    if factory is None and is_gpt_name(key):
        parse_gpt_name(key)  # validate the options before seeding
        def factory(nc: int) -> LayeredModel:
            return build_gpt(key)  # the vocabulary is fixed (ASCII)
    if factory is None:
        from stalesim.workloads.zoo_facts import model_facts

        facts = model_facts(key)  # checks a resnet's depth (6n+2, not absurdly deep)
        if facts is not None:
            depth = facts.weight_layers

            def factory(nc: int) -> LayeredModel:
                return _resnet(depth, nc)
    if factory is None:
        raise StalesimError(
            f"unknown model {name!r}; known models: {', '.join(model_names())} "
            "(or any resnet<6n+2>, gpt-char:n_layer=L,n_embd=C,n_head=H,block_size=T)"
        )
    return factory


def build_model(name: str, *, num_classes: int = 10, seed: int | None = None,
                input_shape: tuple[int, ...] | None = None) -> LayeredModel:
    """Build a zoo model by name, or the user's (``pkg.module:factory``, see
    :mod:`stalesim.workloads.own`; ``input_shape``: the data set's, used when the factory's
    model does not state one); deterministic for a given ``seed``.

    The seed is applied inside ``torch.random.fork_rng`` so the caller's global
    RNG state is left untouched (the emulator and executor rely on that).
    """
    from stalesim.limits import check_int
    from stalesim.plugins import is_plugin
    from stalesim.workloads.zoo_facts import MAX_CLASSES

    if is_plugin(name):
        from stalesim.workloads.own import build_own_model

        return build_own_model(name, seed=seed, input_shape=input_shape)

    check_int("num_classes", num_classes, lo=1, hi=MAX_CLASSES)
    factory = model_factory(name)
    if seed is None:
        model = factory(num_classes)
        _init_weights(model)
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = factory(num_classes)
        _init_weights(model)
    return model
