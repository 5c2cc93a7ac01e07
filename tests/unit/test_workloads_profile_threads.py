"""One thread default for ``stalesim profile`` and ``stalesim.profile`` (the ranks' one
thread), and the one-line warning when a profile's block sum and whole-model time disagree
beyond the bound (the measurement faked with known times, so the ratio is known)."""

from __future__ import annotations

import inspect
import warnings
from dataclasses import replace

import pytest
import torch

import stalesim
import stalesim.workloads.profiler as profiler
from stalesim.cli import build_parser, main
from stalesim.cli.common import DEFAULT_THREADS
from stalesim.workloads.blocksum import BLOCK_SUM_HIGH, BLOCK_SUM_LOW, block_sum_warning
from stalesim.workloads.profile import BatchPoint, load_profile, uniform_profile
from stalesim.workloads.profiler import RANK_THREADS, BlockSumWarning


def test_every_default_is_the_ranks_one_thread() -> None:
    from stalesim.executor import run_local

    assert RANK_THREADS == DEFAULT_THREADS == 1
    assert inspect.signature(run_local).parameters["threads"].default == RANK_THREADS
    assert inspect.signature(stalesim.profile).parameters["threads"].default == RANK_THREADS
    assert inspect.signature(profiler.profile_model).parameters["threads"].default == RANK_THREADS
    args = build_parser().parse_args(["profile", "--model", "lenet5", "--batch-size", "8", "-o", "p.json"])
    assert args.threads == RANK_THREADS


def _fake_measure(block_s: float, whole_s: float, seen: list[int]):
    """Four blocks of ``block_s`` forward + backward each, the whole step ``whole_s``; records the
    torch threads in force while "measuring"."""
    layers = tuple(uniform_profile(4, block_s / 2, block_s / 2, 8).layers)

    def fake(net, sizes, dev, tdtype, repeats, warmup, seed, progress):
        seen.append(torch.get_num_threads())
        return [BatchPoint(b, layers, whole_s) for b in sizes], {}
    return fake


def test_cli_and_api_profile_alike_and_warn_once(monkeypatch, tmp_path, capsys) -> None:
    seen: list[int] = []
    # blocks sum to 4 ms, the whole step 40 ms: ratio 0.1, outside the bound
    monkeypatch.setattr(profiler, "_measure_sizes", _fake_measure(1e-3, 40e-3, seen))
    torch_before = torch.get_num_threads()
    with pytest.warns(BlockSumWarning, match=r"0\.10x the whole-model step") as rec:
        api = stalesim.profile("lenet5", 8, repeats=1, warmup=0)
    assert len(rec) == 1
    assert main(["profile", "--model", "lenet5", "--batch-size", "8", "--repeats", "1", "--warmup", "0",
                 "-o", str(tmp_path / "p.json"), "-q"]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("stalesim: warning:")]
    assert len(lines) == 1 and "0.10x the whole-model step" in lines[0]
    assert seen == [RANK_THREADS, RANK_THREADS]  # the CLI and the API measured at the same threads
    assert api.threads == RANK_THREADS and api.sum_over_whole_ratio == pytest.approx(0.1)
    cli = load_profile(tmp_path / "p.json")
    assert cli.threads == api.threads and cli.sum_over_whole_ratio == pytest.approx(0.1)
    assert torch.get_num_threads() == torch_before


def test_no_warning_within_the_bound(monkeypatch) -> None:
    seen: list[int] = []
    monkeypatch.setattr(profiler, "_measure_sizes", _fake_measure(1e-3, 6.6e-3, seen))  # ratio 0.61
    with warnings.catch_warnings():
        warnings.simplefilter("error", BlockSumWarning)
        prof = profiler.profile_model("lenet5", 8, repeats=1, warmup=0, threads=2)
    assert prof.threads == 2 and seen == [2]
    assert prof.sum_over_whole_ratio == pytest.approx(4 / 6.6)


def test_warning_text_names_the_ratio_the_bound_and_the_fix() -> None:
    base = uniform_profile(2, 1e-3, 1e-3, 8, device="cpu")
    assert (BLOCK_SUM_LOW, BLOCK_SUM_HIGH) == (0.5, 2.0)
    for inside in (None, 0.5, 0.59, 1.0, 2.0):
        assert block_sum_warning(replace(base, sum_over_whole_ratio=inside, threads=2)) is None
    many = block_sum_warning(replace(base, sum_over_whole_ratio=0.2, threads=2))
    assert many is not None and "\n" not in many
    assert "0.20x the whole-model step (bound 0.5-2x)" in many and "profile with --threads 1" in many
    one = block_sum_warning(replace(base, sum_over_whole_ratio=2.5, threads=1))
    assert one is not None and "2.50x" in one and "--threads 1" not in one and "quiet machine" in one
