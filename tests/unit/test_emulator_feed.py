"""The batch feed: one fetch per global batch, shards of the batch axis, dropped after its last LOSS."""

from __future__ import annotations

import torch

from stalesim.emulator.feed import BatchedFeed, BatchFeed
from stalesim.emulator.state import Handoff


def _fetch(calls: list[int]):
    def fetch(t: int) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(t)
        x = torch.arange(8, dtype=torch.float32).reshape(8, 1) + 100 * t
        return x, torch.arange(8) + 100 * t
    return fetch


def test_one_fetch_per_batch_and_shards_worker_then_micro() -> None:
    calls: list[int] = []
    hand = Handoff()
    feed = BatchFeed(_fetch(calls), torch.device("cpu"), hand, workers=2, micros=2, readers=3)
    # worker 1 holds rows 4..7, its micro-batch 1 rows 6..7
    assert feed.inputs(5, 1, 1).flatten().tolist() == [506.0, 507.0]
    assert feed.targets(5, 0, 0).tolist() == [500, 501]
    assert feed.targets(5, 0, None).tolist() == [500, 501, 502, 503]  # no micro: the worker's shard
    assert calls == [5] and hand.batch_left == {5: 3}


def test_batch_dropped_after_its_last_reader_and_labels_read_anew() -> None:
    calls: list[int] = []
    hand = Handoff()
    feed = BatchFeed(_fetch(calls), torch.device("cpu"), hand, workers=1, micros=1, readers=2)
    feed.targets(0, 0, None)
    feed.consumed(0)
    assert hand.batch_left == {0: 1}
    feed.consumed(0)
    assert hand.batch_left == {}
    feed.inputs(0, 0, None)  # fetched again once dropped
    assert calls == [0, 0]
    assert feed.labels(3, 0, None).tolist() == list(range(300, 308))  # straight from the stream
    assert calls == [0, 0, 3] and 3 not in hand.batch_left


def test_batched_feed_stacks_runs_and_shards_axis_1() -> None:
    def stream(k: int):
        def s(t: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.full((4, 1), float(10 * k + t)), torch.arange(4) + 10 * k
        return s

    feed = BatchedFeed([stream(0), stream(1)], torch.device("cpu"), Handoff(), workers=2, micros=1, readers=1)
    x = feed.inputs(2, 1, None)
    assert x.shape == (2, 2, 1) and x[:, :, 0].tolist() == [[2.0, 2.0], [12.0, 12.0]]
    assert feed.targets(2, 1, None).tolist() == [[2, 3], [12, 13]]
