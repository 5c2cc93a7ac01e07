"""The character GPT in the zoo: names and options, causality, PPV counting, partitioning,
FLOP probe and profiler with token inputs."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.workloads.gpt import GPTConfig, gpt_name, parse_gpt_name
from stalesim.workloads.partition import block_flops, default_ppv, ppv_to_cuts, split_stages
from stalesim.workloads.zoo import build_model, model_names, model_task

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=8"


def test_default_model_and_its_blocks():
    m = build_model("gpt-char", seed=0)
    assert m.name == "gpt-char" and "gpt-char" in model_names()
    assert m.block_names == ["embed", "h0", "h1", "h2", "h3", "head"]
    assert m.weight_layers == [1] * 6  # one PPV unit per block
    assert m.input_shape == (128,) and m.input_dtype == torch.long and m.label_shape == (128,)
    assert m.task == "lm" and m.default_dataset == "shakespeare"
    # 4 x (12 C^2 + 13 C) + embeddings (128 + 128) C + final LN 2C + head 128 C, C = 128
    C = 128
    assert sum(p.numel() for p in m.parameters()) == 4 * (12 * C * C + 13 * C) + 256 * C + 2 * C + 128 * C


def test_options_parse_round_trip_and_errors():
    cfg = parse_gpt_name("gpt-char:block_size=256,n_layer=12,n_embd=384,n_head=6")
    assert cfg == GPTConfig(n_layer=12, n_embd=384, n_head=6, block_size=256)
    assert gpt_name(cfg) == "gpt-char:n_layer=12,n_embd=384,n_head=6,block_size=256"
    assert parse_gpt_name(gpt_name(cfg)) == cfg
    assert gpt_name(GPTConfig()) == "gpt-char"
    assert model_task("gpt-char:n_layer=2") == "lm" and model_task("resnet20") == "classify"
    assert model_task("mynet") is None
    from stalesim.workloads import zoo
    from stalesim.workloads.names import CNN_FIXED

    assert set(CNN_FIXED) == set(zoo._FIXED)  # the torch-free name table knows every zoo CNN
    for bad, needle in [("gpt-char:depth=2", "unknown gpt-char option 'depth'"),
                        ("gpt-char:n_layer=0", "n_layer must be an integer >= 1"),
                        ("gpt-char:n_layer=x", "must be an integer"),
                        ("gpt-char:n_layer", "key=value"),
                        ("gpt-char:n_embd=10,n_head=4", "not divisible")]:
        with pytest.raises(StalesimError, match=needle):
            build_model(bad)


def test_same_seed_same_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(TINY, seed=5)
    after = torch.rand(1)
    b = build_model(TINY, seed=5)
    assert torch.equal(before, after)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_attention_is_causal_and_split_stages_compose():
    m = build_model(TINY, seed=0).double().eval()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (3, 8), generator=g)
    y = m(x)
    assert y.shape == (3, 8, 128)
    x2 = x.clone()
    x2[:, 5:] = (x2[:, 5:] + 7) % 128  # change the future
    y2 = m(x2)
    torch.testing.assert_close(y2[:, :5], y[:, :5])
    assert not torch.allclose(y2[:, 5:], y[:, 5:])
    stages = split_stages(m, ppv=[1, 3])  # embed | h0 h1 | head
    assert [list(dict(s.named_children())) for s in stages] == [["embed"], ["h0", "h1"], ["head"]]
    z = x
    for s in stages:
        z = s(z)
    torch.testing.assert_close(z, y)


def test_ppv_counts_blocks_and_default_partition_balances_flops():
    m = build_model("gpt-char", seed=0)
    assert ppv_to_cuts(m, [1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]
    with pytest.raises(StalesimError, match="out of range"):
        ppv_to_cuts(m, [6])
    f = block_flops(m)
    # per transformer block: linears 2 T C (3C + C + 4C + 4C) + attention 4 T^2 C (QK^T and AV)
    T, C = 128, 128
    assert f[1:5] == [2 * T * C * 12 * C + 4 * T * T * C] * 4
    assert f[0] == 0 and f[5] == 2 * T * C * 128
    assert default_ppv(m, 4) == [2, 3, 4]  # embed+h0 | h1 | h2 | h3+head
    assert default_ppv(m, 6) == [1, 2, 3, 4, 5]
    with pytest.raises(StalesimError, match="only 6 blocks"):
        default_ppv(m, 7)


def test_profiler_handles_token_inputs():
    from stalesim.workloads.profiler import profile_model

    prof = profile_model(TINY, 2, repeats=1, warmup=0, threads=1)
    names = [lp.name for lp in prof.layers]
    assert names == ["embed", "h0", "h1", "head"]
    assert all(lp.weight_layers == 1 for lp in prof.layers)
    assert prof.layers[1].flops > 0 and prof.layers[1].backward_flops > prof.layers[1].flops
    assert prof.layers[0].output_bytes == 2 * 8 * 16 * 4  # (B, T, C) float32
