"""The emulator runs every new schedule: the synchronous ones (virtual stages, split
backward) give gpipe's losses with the same stages and micro-batching, up to float
reassociation (float32: relative 1e-6; so far they are bitwise equal except looped BFS,
whose LIFO backwards accumulate the micro-batch gradients in another order); the
asynchronous interleaved ones read exactly the versions their derived table says."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig

SYNC = ["interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "dualpipev"]


def run(name: str, **kw) -> dict:
    torch.set_num_threads(1)
    base = dict(model="lenet5", dataset="synthetic", iterations=5, batch_size=24,
                synthetic_size=96, lr=0.05, stages=4, microbatches=4)
    base.update(kw)
    return Emulator(TrainConfig(schedule=name, **base).check(), progress=False).run()


@pytest.fixture(scope="module")
def gpipe_losses() -> dict:
    return {m: run("gpipe", **kw)["losses"] for m, kw in
            [("lenet5", {}), ("resnet8", dict(model="resnet8", batch_size=8, synthetic_size=32,
                                              iterations=3))]}


@pytest.mark.parametrize("name", SYNC)
def test_synchronous_schedules_train_like_gpipe(name, gpipe_losses):
    out = run(name)
    assert out["versions_match_ir"] and out["staleness_ir"] == [0, 0, 0, 0]
    for a, b in zip(out["losses"], gpipe_losses["lenet5"], strict=True):
        assert a == pytest.approx(b, rel=1e-6)


@pytest.mark.parametrize("name", ["zb-v", "dualpipev", "zb-h1"])
def test_split_backward_through_batchnorm_blocks(name, gpipe_losses):
    out = run(name, model="resnet8", batch_size=8, synthetic_size=32, iterations=3)
    for a, b in zip(out["losses"], gpipe_losses["resnet8"], strict=True):
        assert a == pytest.approx(b, rel=1e-6)


@pytest.mark.parametrize("name, stale", [("interleaved-pipedream", [1, 1, 0, 0]),
                                         ("interleaved-2bw", [1, 1, 1, 1])])
def test_async_interleaved_variants_replay_their_versions(name, stale, gpipe_losses):
    out = run(name, iterations=8)
    assert out["versions_match_ir"] and out["staleness_ir"] == stale
    assert out["losses"][0] == gpipe_losses["lenet5"][0]  # nothing stale yet
    assert out["losses"][2] != gpipe_losses["lenet5"][2]  # stale weights change the run
