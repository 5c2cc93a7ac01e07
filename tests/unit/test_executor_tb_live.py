"""stalesim.executor.tb_live: the loss rank's writer, whose event file a resumed run's reader
takes after the earlier attempt's, and whose points are the losses handed to it."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from stalesim.executor.tb_live import LiveLoss

pytest.importorskip("tensorboard")
import torch.utils.tensorboard  # noqa: E402,F401  (imported now: the writer then opens within milliseconds)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def test_a_resumed_writer_sorts_after_an_attempt_of_the_same_second(tmp_path):
    """An earlier attempt's file of this second, from a process whose pid sorts last as text:
    the resumed writer's file still sorts after it, and its losses are read back."""
    time.sleep(1.0 - time.time() % 1.0)  # at a second's start: the writer opens in this second unless it waits
    now = int(time.time())
    old = tmp_path / f"events.out.tfevents.{now:010d}.zzzz.99999.99"
    old.write_bytes(b"")
    losses = {(0, 1, 3): 2.5, (0, 1, 4): 2.25}
    live = LiveLoss(tmp_path, losses, stage=1, workers=1, remaining=Counter({3: 1, 4: 1}), every=1,
                    last_step=4, purge_step=3)
    live.loss_done(0, 1, 3)
    live.loss_done(0, 1, 4)
    live.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and names[0] == old.name
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 2.5), (4, 2.25)]
