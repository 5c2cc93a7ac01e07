"""The profiler measures real, positive times and sane byte counts (lenet5, tiny batch)."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.workloads.profiler import parse_device, parse_dtype, profile_model


@pytest.fixture(scope="module")
def lenet_profile():
    return profile_model("lenet5", [8, 16], repeats=2, warmup=1, threads=1)


def test_profile_lenet5_values(lenet_profile) -> None:
    p = lenet_profile
    assert p.model == "lenet5" and p.device == "cpu" and p.dtype == "float32"
    assert p.batch_size == 8 and p.repeats == 2 and p.threads == 1
    assert [lp.name for lp in p.layers] == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    assert p.weight_layers == [1, 1, 1, 1, 1]
    for lp in p.layers:
        assert lp.forward_s > 0 and lp.backward_s > 0 and lp.update_s > 0
        assert lp.spread is not None
        assert lp.spread["forward_s"]["min"] <= lp.forward_s <= lp.spread["forward_s"]["max"]
    # exact byte counts for batch 8
    assert [lp.param_bytes for lp in p.layers] == [624, 9664, 192480, 40656, 3400]
    assert [lp.output_bytes for lp in p.layers] == [8 * 6 * 14 * 14 * 4, 8 * 16 * 5 * 5 * 4,
                                                    8 * 120 * 4, 8 * 84 * 4, 8 * 10 * 4]
    # conv1 saves its input, the ReLU output and the int64 max-pool indices
    assert p.layers[0].saved_bytes == 8 * 784 * 4 + 8 * 6 * 784 * 4 + 8 * 6 * 196 * 8
    # forward FLOPs: 2 * MACs
    assert p.layers[0].flops == 2 * 8 * 6 * 28 * 28 * 25
    assert p.layers[2].flops == 2 * 8 * 400 * 120
    # block 0 needs no input gradient: backward FLOPs = forward; others ~2x
    assert p.layers[0].backward_flops == p.layers[0].flops
    assert p.layers[2].backward_flops == 2 * p.layers[2].flops
    assert p.whole_model_s is not None and p.whole_model_s > 0
    assert p.sum_over_whole_ratio == pytest.approx(sum(p.costs()) / p.whole_model_s)


def test_profile_several_batch_sizes(lenet_profile) -> None:
    p = lenet_profile
    assert [b.batch_size for b in p.by_batch_size] == [8, 16]
    q = p.at_batch_size(16)
    assert q.layers[0].output_bytes == 2 * p.layers[0].output_bytes
    assert q.layers[0].flops == 2 * p.layers[0].flops
    from stalesim.workloads.profile import profile_from_dict

    assert profile_from_dict(p.to_dict()) == p


def test_profile_does_not_leak_threads_or_rng() -> None:
    before = torch.get_num_threads()
    state = torch.get_rng_state()
    profile_model("lenet5", 2, repeats=1, warmup=0, threads=1)
    assert torch.get_num_threads() == before
    assert torch.equal(torch.get_rng_state(), state)


def test_profile_bad_inputs() -> None:
    with pytest.raises(StalesimError, match="unknown model"):
        profile_model("nope", 8)
    with pytest.raises(StalesimError, match="batch_size"):
        profile_model("lenet5", 0)
    with pytest.raises(StalesimError, match="device"):
        parse_device("tpu")
    with pytest.raises(StalesimError, match="dtype"):
        parse_dtype("float8")
    if not torch.cuda.is_available():
        with pytest.raises(StalesimError, match="no CUDA device"):
            parse_device("cuda:0")


@pytest.mark.gpu
def test_profile_cuda_events() -> None:
    p = profile_model("lenet5", 8, repeats=2, warmup=1, device="cuda")
    assert p.device == "cuda:0" and p.meta["timer"] == "cuda-events"
    assert all(lp.forward_s > 0 for lp in p.layers)


def test_profile_bfloat16_halves_bytes(lenet_profile) -> None:
    p = profile_model("lenet5", 8, repeats=1, warmup=0, dtype="bfloat16", threads=1)
    assert p.dtype == "bfloat16"
    assert [lp.param_bytes * 2 for lp in p.layers] == [lp.param_bytes for lp in lenet_profile.layers]
    assert [lp.output_bytes * 2 for lp in p.layers] == [
        lp.output_bytes for lp in lenet_profile.layers
    ]


def test_profile_measures_the_split_backward(lenet_profile) -> None:
    """I (input gradient) and W (weight gradient) per block, as the stage runtime runs them
    (the first block's I still computes the gradients at its modules' outputs)."""
    for lp in lenet_profile.layers:
        assert lp.measured_split
        assert lp.backward_weight_s > 0 and lp.backward_input_s > 0
        assert set(lp.spread) >= {"backward_input_s", "backward_weight_s"}
    back = lenet_profile.from_dict(lenet_profile.to_dict())
    assert [lp.backward_split() for lp in back.layers] == [lp.backward_split() for lp in lenet_profile.layers]
