"""The memory preflight: estimates from names only (checked against built models), and a
one-line refusal from every command that allocates a model or data, before it allocates."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from stalesim.cli import main
from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.preflight import (
    MEMORY_ENV,
    MemoryEstimate,
    check_memory,
    data_bytes,
    estimate_run,
    model_size,
)
from stalesim.workloads.zoo import build_model

GPT = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


@pytest.mark.parametrize("name", ["lenet5", "resnet20", "resnet44", GPT])
def test_parameter_counts_match_the_built_models(name):
    params, acts = model_size(name)
    assert params == sum(p.numel() for p in build_model(name, seed=0).parameters())
    assert acts > 0


def test_the_estimate_of_a_small_run_is_small_and_adds_up():
    cfg = TrainConfig(model="lenet5", dataset="synthetic", synthetic_size=1024, iterations=2).check()
    est = estimate_run(cfg)
    assert est.weights == 61_706 * 4 * 3  # weights, gradients, SGD momentum
    assert est.activations == 128 * 15_002 * 4
    assert est.data == data_bytes(cfg) == (1024 + 256) * 784 * 4
    assert est.total < 16 << 20
    assert est.times(3, data=1) == MemoryEstimate(est.weights * 3, est.activations * 3, est.data)


def test_check_memory_names_the_estimate_and_the_limit(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(1 << 30))
    est = MemoryEstimate(weights=2 << 30, activations=1 << 30, data=0)
    with pytest.raises(StalesimError, match=r"^memory: x needs at least 3\.0 GiB \(weights, gradients and "
                                            r"optimizer state 2\.0 GiB, .*\) but 1\.0 GiB are available "
                                            rf"\({MEMORY_ENV}\)"):
        check_memory(est, "x")
    assert check_memory(MemoryEstimate(1, 1, 1), "x").total == 3
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(StalesimError, match=MEMORY_ENV):
        check_memory(est, "x")


SYN = ["--dataset", "synthetic", "--iterations", "2", "--quiet"]
HUGE_BLOCK = ["--model", "gpt-char:n_layer=1,n_embd=64,n_head=1,block_size=65536", "--batch-size", "128",
              "--synthetic-size", "4"]
HUGE_PARAMS = ["--model", "gpt-char:n_layer=1024,n_embd=576,n_head=8,block_size=16", "--batch-size", "2",
               "--synthetic-size", "4", "--optimizer", "adam"]
HUGE_DATA = ["--model", "gpt-char:n_layer=1,n_embd=16,n_head=1,block_size=4096", "--batch-size", "2",
             "--synthetic-size", "100000"]


@pytest.mark.parametrize("cmd", [["emulate"], ["study", "--schedules", "stale", "--placements", "S2", "--seeds",
                                                "0,1", "--jobs", "2"],
                                  ["study", "--schedules", "stale", "--placements", "S2", "--seeds", "0,1",
                                   "--batched"],
                                  ["run", "--devices", "cpu:2", "--schedule", "stale", "--stages", "2"]])
@pytest.mark.parametrize("shape", [HUGE_BLOCK, HUGE_PARAMS, HUGE_DATA])
def test_commands_refuse_what_cannot_fit_in_one_line_at_once(capsys, tmp_path, monkeypatch, cmd, shape):
    monkeypatch.setenv(MEMORY_ENV, str(16 << 30))  # the same answer on any machine
    t0 = time.perf_counter()
    out = ["--out", str(tmp_path / "o")]
    syn = [a for a in SYN if a != "--quiet"] if cmd[0] == "run" else SYN
    rc = main([*cmd, *syn, *shape, *out] if cmd[0] != "emulate" else [*cmd, *syn, *shape])
    err = capsys.readouterr().err.strip().splitlines()
    if shape is HUGE_DATA:  # 409,600,000 characters: beyond what the synthetic text draws, before memory
        assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: synthetic_size: 100,000 "), err
    else:
        assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: memory: "), err
        assert "GiB are available (STALESIM_MEMORY_BYTES)" in err[0]
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "o" / "runs").exists()


def test_profile_and_validate_refuse_what_cannot_fit(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(1 << 30))
    rc = main(["profile", "--model", "vgg16", "--batch-size", "1048576", "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: memory: profiling vgg16"), err
    rc = main(["validate", "--model", "vgg16", "--devices", "cpu:2", "--schedules", "stale",
               "--batch-size", "1048576", "--iterations", "4", "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: memory: validating vgg16"), err
    assert not (tmp_path / "p.json").exists()


def test_a_small_run_passes_the_preflight(capsys, tmp_path):
    assert main(["emulate", "--model", "lenet5", *SYN, "--batch-size", "8", "--synthetic-size", "32"]) == 0


def test_on_gpus_the_model_is_spread_and_the_data_stays_on_the_host(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(3 << 29))  # 1.5 GiB "free" on every device
    est = MemoryEstimate(weights=2 << 30, activations=1 << 30, data=1 << 30)
    assert check_memory(est, "run", device="cuda:0", split=3) == est  # 1 GiB per GPU, 1 GiB of data
    with pytest.raises(StalesimError, match="needs at least 3.0 GiB"):
        check_memory(est, "run", device="cuda:0")  # one GPU holds it all
    with pytest.raises(StalesimError, match="needs at least 2.0 GiB"):
        check_memory(MemoryEstimate(0, 0, 2 << 30), "run", device="cuda:0", split=3)  # the data on the host
