"""CUDA/NCCL path of the executor (skipped without GPUs: marked ``gpu``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from executor import make_job, run_local  # noqa: E402
from stalesim.runtime.config import TrainConfig  # noqa: E402


def _cfg(**over) -> TrainConfig:
    kw = {"model": "lenet5", "dataset": "synthetic", "iterations": 8, "batch_size": 32,
          "synthetic_size": 256}
    kw.update(over)
    return TrainConfig(**kw).check()


@pytest.mark.gpu
def test_one_gpu_rank_measures_with_cuda_events_and_allocator_peak():
    res = run_local(make_job(_cfg(schedule="sequential", stages=1)), "cuda:0", timeout_s=120)
    assert res["device_kind"] == "cuda"
    assert res["peak_memory_kind"] == "cuda.max_memory_allocated"
    assert res["peak_memory_bytes"]["0"] > 0 and res["iteration_time_s"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("name", ["stale", "1f1b", "dp"])
def test_two_gpus_over_nccl(name):
    over = {"schedule": name, "stages": 2}
    if name == "1f1b":
        over["microbatches"] = 2
    if name == "dp":
        over.update(stages=1, workers=2)
    res = run_local(make_job(_cfg(**over)), "cuda:0,1", timeout_s=120)
    assert res["versions_match_ir"] and res["staleness"] == res["staleness_ir"]
    assert all(x == x for x in res["losses"])  # finite
