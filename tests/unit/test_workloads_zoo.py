"""Model zoo: shapes, weight-layer counts, determinism, bring-your-own models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.workloads.zoo import LayeredModel, build_model, model_names


@pytest.mark.parametrize(
    "name,wl,params",
    [
        ("lenet5", 5, 61_706),
        ("alexnet", 8, 23_272_266),
        ("vgg16", 16, 15_249_354),
        ("resnet20", 20, 269_722),
        ("resnet56", 56, 853_018),
    ],
)
def test_shapes_and_weight_layers(name: str, wl: int, params: int) -> None:
    model = build_model(name, seed=0)
    assert isinstance(model, LayeredModel)
    assert sum(model.weight_layers) == wl
    assert len(model.weight_layers) == len(model.blocks) == len(model.block_names)
    assert sum(p.numel() for p in model.parameters()) == params
    out = model(model.example_input(3))
    assert out.shape == (3, 10)


def test_param_memory_matches_paper_table9() -> None:
    # Zhang & Abdelrahman Table 9 "total weight memory (MB)" (MiB of float32).
    expected = {"lenet5": 0.24, "alexnet": 88.87, "vgg16": 58.16, "resnet20": 1.03}
    for name, mib in expected.items():
        n = sum(p.numel() for p in build_model(name).parameters())
        assert n * 4 / 2**20 == pytest.approx(mib, rel=0.02), name


@pytest.mark.parametrize("depth", [20, 32, 44, 110, 224, 362])
def test_resnet_depths(depth: int) -> None:
    model = build_model(f"resnet{depth}")
    n = (depth - 2) // 6
    assert sum(model.weight_layers) == 6 * n + 2 == depth
    assert model.weight_layers[0] == 1 and model.weight_layers[-1] == 1
    assert all(w == 2 for w in model.weight_layers[1:-1])
    assert len(model.blocks) == 3 * n + 2
    assert model.block_names[0] == "stem" and model.block_names[-1] == "head"
    assert model.input_shape == (3, 32, 32) and model.default_dataset == "cifar10"


def test_resnet_option_a_has_no_shortcut_params() -> None:
    model = build_model("resnet20")
    down = model.blocks[4]  # g2b0: 16 -> 32 channels, stride 2
    assert sum(isinstance(m, nn.Conv2d) for m in down.modules()) == 2
    y = down(torch.randn(2, 16, 32, 32))
    assert y.shape == (2, 32, 16, 16)


def test_lenet_mnist_and_num_classes() -> None:
    m = build_model("lenet5", num_classes=7)
    assert m.input_shape == (1, 28, 28) and m.default_dataset == "mnist"
    assert m(torch.zeros(2, 1, 28, 28)).shape == (2, 7)


def test_seed_is_deterministic_and_leaves_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = build_model("resnet20", seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    b = build_model("resnet20", seed=5)
    c = build_model("resnet20", seed=6)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))


def test_unknown_model_lists_known() -> None:
    with pytest.raises(StalesimError, match=r"unknown model 'resnet9x'.*lenet5.*resnet20"):
        build_model("resnet9x")
    with pytest.raises(StalesimError, match="6n\\+2"):
        build_model("resnet21")
    assert {"lenet5", "alexnet", "vgg16", "resnet20", "resnet110"} <= set(model_names())


def test_from_sequential_user_model() -> None:
    seq = nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()),
        nn.ReLU(),  # 0 weight layers: rides with the block before
        nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 5)),
    )
    m = LayeredModel.from_sequential(seq, name="mine", input_shape=(3, 4, 4))
    assert m.weight_layers == [1, 0, 1]
    assert m.block_names == ["block0", "block1", "block2"]
    assert m(torch.zeros(2, 3, 4, 4)).shape == (2, 5)
    # a plain list of modules = explicit split points
    m2 = LayeredModel.from_sequential(list(seq), name="mine2", input_shape=(3, 4, 4),
                                      block_names=["a", "b", "c"])
    assert m2.block_names == ["a", "b", "c"]
    with pytest.raises(StalesimError, match="block_names"):
        LayeredModel.from_sequential(list(seq), name="x", input_shape=(3, 4, 4), block_names=["a"])
    with pytest.raises(StalesimError, match="not an nn.Module"):
        LayeredModel([("a", 3)], name="bad", input_shape=(1, 1, 1))  # type: ignore[list-item]


@pytest.mark.parametrize("name", ["lenet5", "resnet20", "gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8"])
def test_random_batch_is_what_the_model_reads(name: str) -> None:
    """The one example batch every driver of a zoo model uses: images (cast) or token ids,
    labels of the label shape below the output width; seeded; asking leaves the model alone."""
    model = build_model(name, seed=0).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    x, y = model.random_batch(3, torch.Generator().manual_seed(5), torch.bfloat16)
    width = model.output_width()
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BN stats too
    assert x.shape == (3, *model.input_shape) and y.shape == (3, *model.label_shape)
    assert y.dtype == torch.long and int(y.min()) >= 0 and int(y.max()) < width
    if model.task == "lm":
        assert x.dtype == torch.long and int(x.max()) < width == model.vocab_size
        assert y.shape == (3, model.input_shape[0])
    else:
        assert x.dtype == torch.bfloat16 and width == 10
    x2, y2 = model.random_batch(3, torch.Generator().manual_seed(5), torch.bfloat16)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert model(x if model.task == "lm" else x.float()).shape[-1] == width
