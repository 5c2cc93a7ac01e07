"""The tally: LOSS values queued on the device, read every ``read_every`` batches, logged in order."""

from __future__ import annotations

import math
from typing import Any

import torch

from stalesim.emulator.state import BatchedRunState, RunState
from stalesim.emulator.tally import BatchedTally, Tally
from stalesim.runtime.config import TrainConfig

CFG = TrainConfig(model="lenet5", dataset="synthetic", schedule="pipedream", stages=2, iterations=4,
                  lr=0.5)


def _tally(read_every: int, evaluate: Any = None) -> Tally:
    return Tally(RunState(), CFG, evaluate or (lambda: {"test_accuracy": 0.5}), bpe=2, total=4, workers=2,
                 losses_per_batch=2, read_every=read_every, clock=lambda: 1.0)


def _loss(tally: Tally, t: int, value: float, correct: int) -> None:
    out = torch.zeros(2, 3)
    out[:correct, 1] = 1.0  # argmax 1 for the first `correct` samples
    tally.record(t, out, torch.ones(2, dtype=torch.long), torch.tensor(value))


def test_read_every_two_batches_and_loss_is_the_mean_over_workers() -> None:
    tally = _tally(read_every=2)
    for w in range(2):
        _loss(tally, 0, 1.0 + w, correct=w)
    assert tally.state.losses == {}  # one batch complete: not read yet
    for _ in range(2):
        _loss(tally, 1, 3.0, correct=2)
    assert tally.state.losses == {0: 1.5, 1: 3.0}
    assert tally.state.correct == {0: 5} and tally.state.seen == {0: 8}  # one epoch: bpe 2
    assert [m["step"] for m in tally.state.metrics] == [0, 1]
    assert tally.state.metrics[0]["lr"] == CFG.lr_at(0, 4)


def test_epoch_end_pops_the_counts_and_logs_the_evaluation() -> None:
    tally = _tally(read_every=1)
    for t in (0, 1):
        for _ in range(2):
            _loss(tally, t, 1.0, correct=1)
    tally.end_epoch(0)
    assert tally.state.epochs == [{"epoch": 0, "train_accuracy": 0.5, "test_accuracy": 0.5, "wall_time_s": 1.0}]
    assert tally.state.correct == {} and tally.state.seen == {}


def test_divergence_stops_logging_at_that_batch() -> None:
    tally = _tally(read_every=3)
    for t, v in ((0, 1.0), (1, math.inf), (2, 2.0)):
        for _ in range(2):
            _loss(tally, t, v, correct=0)
    assert tally.state.diverged_at == 1
    assert list(tally.state.losses) == [0, 1]  # batch 2 ran but is not logged


def test_batched_tally_keeps_a_diverged_run_out_of_its_log() -> None:
    cfgs = [CFG, CFG]
    tally = BatchedTally(BatchedRunState.fresh(2), cfgs, lambda: [{}, {}], bpe=2, total=4, workers=1,
                         losses_per_batch=1, read_every=1, clock=lambda: 0.0)
    y = torch.ones(2, 2, dtype=torch.long)
    out = torch.zeros(2, 2, 3)
    tally.record(0, out, y, torch.tensor([1.0, math.nan]))
    tally.record(1, out, y, torch.tensor([2.0, 3.0]))
    st = tally.state
    assert st.run_diverged_at == [None, 0] and st.diverged_at is None
    assert [m["step"] for m in st.run_metrics[0]] == [0, 1]
    assert [m["step"] for m in st.run_metrics[1]] == [0]  # the diverged run stops at its batch
    assert st.seen == {0: [4, 4]} and st.correct == {0: [0, 0]}
