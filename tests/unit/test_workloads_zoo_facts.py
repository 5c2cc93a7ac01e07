"""Facts about zoo models known without building them must match the built models."""

from __future__ import annotations

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.zoo import build_model
from stalesim.workloads.zoo_facts import MAX_RESNET_DEPTH, model_facts, model_names


@pytest.mark.parametrize("name", ["lenet5", "alexnet", "vgg16", "resnet8", "resnet20", "resnet56", "gpt-char",
                                  "gpt-char:n_layer=2,n_embd=32,n_head=2,block_size=16"])
def test_facts_match_the_built_model(name: str) -> None:
    facts = model_facts(name)
    model = build_model(name)
    assert facts is not None
    assert facts.blocks == len(model.block_names)
    assert facts.weight_layers == sum(model.weight_layers) == model.total_weight_layers
    assert facts.default_dataset == model.default_dataset
    assert facts.input_shape == tuple(model.input_shape)


def test_names_and_bad_depths() -> None:
    assert model_facts("nosuch") is None and model_facts(" LeNet5 ").name == "lenet5"  # type: ignore[union-attr]
    assert set(model_names()) >= {"lenet5", "resnet20"}
    for bad, msg in [("resnet21", "6n\\+2"), ("resnet2", "6n\\+2"), (f"resnet{MAX_RESNET_DEPTH + 6}", "deeper"),
                     ("resnet" + "9" * 40, "deeper")]:
        with pytest.raises(StalesimError, match=msg):
            model_facts(bad)
        with pytest.raises(StalesimError, match=msg):
            build_model(bad)  # the zoo itself refuses the same names, before building anything


@pytest.mark.parametrize("name,needle", [
    ("gpt-char:n_layer=1000000", "n_layer=1000000 is larger than this tool builds"),
    ("gpt-char:block_size=" + "9" * 12, "block_size=999999999999 is larger"),
    ("gpt-char:n_layer=1024,n_embd=16384,n_head=64", "parameters, more than this tool builds"),
    ("gpt-char:n_layer=0", "must be an integer >= 1"),
    ("gpt-char:n_layer=" + "9" * 5000, "must be an integer"),
])
def test_gpt_sizes_are_bounded_before_building(name: str, needle: str) -> None:
    """A typo such as n_layer=1000000 is one line at once, from the facts and from the zoo."""
    with pytest.raises(StalesimError, match=needle):
        model_facts(name)
    with pytest.raises(StalesimError, match=needle):
        build_model(name)


@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50", "ResNet101", "resnet152"])
def test_imagenet_resnet_names_refused(name: str) -> None:
    """resnet50/152 are 6n+2 too, but everyone means the ImageNet nets: refused with the CIFAR list."""
    for fn in (model_facts, build_model):
        with pytest.raises(StalesimError, match="no ImageNet ResNet.*resnet20, resnet32, resnet44, resnet56"):
            fn(name)


def test_profile_refuses_resnet50_one_line(capsys, tmp_path) -> None:
    from stalesim.cli import main

    assert main(["profile", "--model", "resnet50", "--batch-size", "8", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stalesim: error: model 'resnet50'") and "resnet56" in err[0]
    assert model_facts("resnet56").weight_layers == 56  # type: ignore[union-attr]  # other depths stay
