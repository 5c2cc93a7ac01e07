"""The emulator's hot loop reads no tensor value on the host (CPU-checkable twin of the
GPU test in ``tests/test_gpu_hostsync.py``).

Every host read of a device value synchronises a GPU (see stalesim.runtime.devio). With
``read_every`` larger than the run, the only reads left are the one batched read at the
end (one per dtype: the losses, the correct counts): zero per action in between. The
values do not depend on when they are read.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from _hostsync import count_host_reads

from stalesim.emulator.batched import BatchedEmulator
from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig

DEVIO = "stalesim/runtime/devio.py"


def _cfg(**kw) -> TrainConfig:
    d = dict(model="lenet5", dataset="synthetic", synthetic_size=64, batch_size=8,  # noqa: C408
             optimizer="sgd", lr=0.02, momentum=0.9, schedule="pipedream", stages=3, iterations=10,
             dtype="float32")
    d.update(kw)
    return TrainConfig(**d).check()


CASES = {
    "pipedream-sgd-clip": {"clip_grad_norm": 0.5},
    "1f1b-adamw-predict": {"schedule": "1f1b", "microbatches": 2, "optimizer": "adamw", "lr": 1e-3,
                           "weight_decay": 0.1, "weight_prediction": True, "clip_grad_norm": 1.0},
    "dp-int8": {"schedule": "dp", "stages": 1, "workers": 2, "compression": "int8"},
    "stale-spike-ef": {"schedule": "stale", "spike_compensation": True, "error_feedback": True},
    "2bw-muon-clip": {"schedule": "2bw", "microbatches": 2, "optimizer": "muon", "lr": 1e-3,
                      "weight_decay": 0.1, "clip_grad_norm": 1.0},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_reads_nothing_per_action(case):
    emu = Emulator(_cfg(**CASES[case]), read_every=10**6, progress=False)
    with count_host_reads() as calls:
        emu.replay()
    assert len(emu.steps) > 100
    assert [c for c in calls if c[1] != DEVIO] == []
    assert len(calls) <= 2  # one read per dtype at the end (losses, correct counts)
    assert len(emu.state.losses) == emu.total


def test_every_batch_read_on_cpu_by_default():
    """On the CPU a read costs nothing: the numbers are read every batch (CUDA: every
    READ_EVERY_CUDA batches)."""
    emu = Emulator(_cfg(), progress=False)
    assert emu.read_every == 1
    with count_host_reads() as calls:
        emu.replay()
    assert len(calls) >= emu.total  # the count the test above shows a regression by


@pytest.mark.parametrize("case", ["pipedream-sgd-clip", "1f1b-adamw-predict"])
def test_values_do_not_depend_on_when_they_are_read(case):
    runs = {}
    for every in (1, 3, 10**6):
        emu = Emulator(_cfg(**CASES[case]), read_every=every, progress=False)
        emu.replay()
        runs[every] = (dict(emu.state.losses), dict(emu.state.correct), dict(emu.state.seen))
    assert runs[1] == runs[3] == runs[10**6]  # bit for bit
    assert all(v == v for v in runs[1][0].values())


def test_divergence_found_at_a_later_read_is_the_same_batch():
    cfg = _cfg(lr=1e15, momentum=0.0, iterations=12)
    one = Emulator(cfg, read_every=1, progress=False)
    one.replay()
    late = Emulator(cfg, read_every=5, progress=False)
    late.replay()
    assert one.state.diverged_at is not None
    assert late.state.diverged_at == one.state.diverged_at
    # nothing logged past the divergence (repr: NaN != NaN)
    assert repr(late.state.losses) == repr(one.state.losses)
    assert late.state.losses.keys() == one.state.losses.keys()


def test_batched_replay_reads_nothing_per_action():
    base = _cfg(schedule="1f1b", microbatches=2, optimizer="adamw", lr=1e-3, weight_decay=0.1,
                clip_grad_norm=1.0, dtype="float64")
    cfgs = [base, replace(base, seed=1, lr=3e-3, clip_grad_norm=None, weight_decay=0.0)]
    emu = BatchedEmulator(cfgs, progress=False, read_every=10**6)
    with count_host_reads() as calls:
        emu.replay()
    assert [c for c in calls if c[1] != DEVIO] == []
    assert len(calls) <= 2
    ref = BatchedEmulator(cfgs, progress=False, read_every=1)
    ref.replay()
    assert emu.state.losses == ref.state.losses and emu.state.correct == ref.state.correct


def test_batched_muon_replay_reads_nothing_per_action():
    base = _cfg(schedule="2bw", microbatches=2, optimizer="muon", lr=1e-3, weight_decay=0.1,
                clip_grad_norm=1.0, iterations=6)
    cfgs = [base, replace(base, seed=1, muon_lr=0.01, muon_momentum=0.9)]
    emu = BatchedEmulator(cfgs, progress=False, read_every=10**6)
    with count_host_reads() as calls:
        emu.replay()
    assert [c for c in calls if c[1] != DEVIO] == []
    assert len(calls) <= 2
