"""A StageRuntime saved mid-flight and put back (stalesim.runtime.stage_checkpoint), as the
emulator's and the executor's checkpoints do: the resumed runtime finishes the batch with
bitwise the uninterrupted run's gradients, and BatchNorm's buffers are the saved ones."""

from __future__ import annotations

import torch
from test_runtime_split_backward import _one_stage_async_schedule
from torch import nn

from stalesim.runtime.config import TrainConfig
from stalesim.runtime.stage import StageRuntime
from stalesim.runtime.stage_checkpoint import restore_runtimes, runtime_state
from stalesim.schedule import Kind


def _fresh(sched, cfg) -> StageRuntime:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()
    return StageRuntime(mod, stage=0, num_stages=1, schedule=sched, cfg=cfg)


def test_a_runtime_resumes_mid_batch_bitwise() -> None:
    sched = _one_stage_async_schedule()
    cfg = TrainConfig(schedule="sequential", stages=1, iterations=2, lr=0.5, momentum=0.0,
                      dtype="float64", batch_size=4)
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    y = torch.tensor([0, 1, 1, 0])
    f, loss, i, w = (next(a for a in sched.device_actions[0] if a.kind is k and a.batch == 0)
                     for k in (Kind.F, Kind.LOSS, Kind.I, Kind.W))
    ref = _fresh(sched, cfg)
    ref.forward(f, x)
    ref.loss(loss, y)
    ref.backward_input(i, None)
    saved = runtime_state(ref)
    assert saved["versions_used"] == ref.versions_used and "seg_grads" in saved["inflight"][(0, None)]
    ref.backward_weight(w)
    # a saved running mean the recomputation cannot reproduce, to see which one survives
    saved["state"]["module"]["1.running_mean"] = saved["state"]["module"]["1.running_mean"] + 1.0

    rt = _fresh(sched, cfg)
    asked = []

    def labels(worker: int, stage: int, batch: int, micro: int | None) -> torch.Tensor:
        asked.append((worker, stage, batch, micro))
        return y

    restore_runtimes([((0, 0), rt, saved)], labels)
    assert asked == [(0, 0, 0, None)]  # the loss had run: recomputed with its labels
    assert rt.versions_used == [tuple(u) for u in saved["versions_used"]]
    bn = saved["state"]["module"]
    assert torch.equal(rt.module[1].running_mean, bn["1.running_mean"])  # the saved, not the recomputed
    rt.backward_weight(w)
    for a, b in zip(rt.buffers[0], ref.buffers[0]):
        assert torch.equal(a, b)
