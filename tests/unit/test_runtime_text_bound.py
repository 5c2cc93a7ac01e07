"""The synthetic text's length bound (stalesim.runtime.text.check_synthetic_text) and its generator:
a huge ``block_size`` is refused at once by the generator and by the memory preflight, and the
chunked generator draws the same characters as the one-list generator it replaced."""

from __future__ import annotations

import time

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.preflight import data_bytes, estimate_run
from stalesim.runtime.text import (
    MAX_SYNTHETIC_TEXT_CHARS,
    SYNTHETIC_TEXT_BYTES_PER_CHAR,
    check_synthetic_text,
    synthetic_text,
    synthetic_text_chars,
)


def _cfg(T: int, size: int, seed: int = 0) -> TrainConfig:
    return TrainConfig(model=f"gpt-char:n_layer=1,n_embd=8,n_head=2,block_size={T}", dataset="synthetic",
                       synthetic_size=size, batch_size=4, iterations=3, seed=seed)


# (seed, synthetic_size, block_size) -> (train chars, val chars, first 40, weighted train sum, val sum),
# drawn by the generator before it was chunked (one Python list of the whole text): runs and stored
# results of gpt-char on synthetic text keep their data
DRAWN = {
    (0, 16, 8): (128, 18, b"pzdp\nljoupdnlqk\nefcgvljldvrug sezgkowwmq", 859_288, 1_900),
    (5, 300, 64): (19_200, 2_133, b"uxyehyyoigtwcuokxdksxdkipkllsaiaqrjqwiqi", 998_323_596, 220_219),
}


@pytest.mark.parametrize("key", list(DRAWN))
def test_the_chunked_generator_draws_the_same_text(key: tuple[int, int, int]) -> None:
    seed, size, T = key
    d = synthetic_text(_cfg(T, size, seed), T)
    weights = torch.arange(d.train.numel()) % 1009
    got = (d.train.numel(), d.val.numel(), bytes(d.train[:40].tolist()), int((d.train.long() * weights).sum()),
           int(d.val.long().sum()))
    assert got == DRAWN[key]
    assert d.train.dtype == torch.uint8


def test_sizes_follow_the_windows() -> None:
    assert synthetic_text_chars(1024, 128) == (131_072, 131_072 + 131_072 // 9)
    assert synthetic_text_chars(1, 100) == (404, 404 + 202)  # at least 4 windows to train, 2 to validate


def test_the_bound_is_inclusive_and_the_refusal_names_both_options() -> None:
    most = MAX_SYNTHETIC_TEXT_CHARS // 128
    check_synthetic_text(most, 128)
    with pytest.raises(StalesimError) as exc:
        check_synthetic_text(most + 1, 128)
    msg = str(exc.value)
    assert msg.startswith(f"synthetic_size: {most + 1:,} windows of block_size 128 are {(most + 1) * 128:,} "
                          f"characters of synthetic text, more than this tool draws (at most "
                          f"{MAX_SYNTHETIC_TEXT_CHARS:,})")
    assert f"--synthetic-size {most} or less" in msg and "\n" not in msg
    with pytest.raises(StalesimError, match=rf"use a block_size of at most {MAX_SYNTHETIC_TEXT_CHARS // 4 - 1:,}"):
        check_synthetic_text(1, MAX_SYNTHETIC_TEXT_CHARS)


@pytest.mark.parametrize("size", [1024, 1])
def test_a_huge_block_is_refused_at_once_by_the_generator_and_the_preflight(size: int) -> None:
    """``block_size=65536`` with the default 1,024 windows drew 74M characters for minutes (and
    4.8 GB); now both the preflight and the generator refuse before drawing one. One window of
    65,536 is under the bound (4 windows are drawn at least) and goes on to the memory check."""
    cfg = _cfg(65536, size)
    t0 = time.perf_counter()
    if size == 1:
        assert data_bytes(cfg) == synthetic_text_chars(1, 65536)[1] * SYNTHETIC_TEXT_BYTES_PER_CHAR
        return
    with pytest.raises(StalesimError, match=rf"^synthetic_size: 1,024 windows of block_size 65,536 .*-size "
                                            rf"{MAX_SYNTHETIC_TEXT_CHARS // 65536} "):
        estimate_run(cfg)
    with pytest.raises(StalesimError, match=r"^synthetic_size: "):
        synthetic_text(cfg, 65536)
    assert time.perf_counter() - t0 < 1.0


def test_train_config_check_refuses_oversized_synthetic_text():
    """The config's own check (what the Python API calls) uses the same bound as the generator."""
    cfg = TrainConfig(model="gpt-char:n_layer=1,n_embd=16,n_head=2,block_size=65536", dataset="synthetic",
                      batch_size=2, iterations=1)
    with pytest.raises(StalesimError, match="synthetic_size: .* windows of block_size 65,536"):
        cfg.check()
