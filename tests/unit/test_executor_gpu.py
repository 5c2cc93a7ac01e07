"""CUDA/NCCL path of the executor (skipped without GPUs: marked ``gpu``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stalesim.executor import make_job, run_local  # noqa: E402
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
    assert res["versions_match_ir"] and res["staleness_measured"] == res["staleness_ir"]
    assert all(x == x for x in res["losses"])  # finite


# ---------------------------------------------------------------- the gpu-check campaign's paths
# (docs/gpu-check.md; the campaign runs every schedule, these a representative few, so that
# `pytest -m gpu` stays inside its part's budget)
def _assert_match(cases, devices):
    from lab.gpucheck.execsteps import compare, run_jobs
    from lab.gpucheck.report import Outcome

    o = Outcome()
    compare(o, cases, run_jobs(cases, devices, dry=False), devices, dry=False)
    bad = [(c.name, c.value) for c in o.checks if not c.ok]
    assert len(o.checks) == len(cases) and not bad, bad


@pytest.mark.gpu
def test_one_gpu_folded_matches_the_emulator_on_the_gpu():
    """All stages on cuda:0 (fold 1): executor losses == the emulator's on the same GPU, within
    LOSS_REL_TOL (float32, TF32 convolutions), versions and staleness those of the IR."""
    from lab.gpucheck.jobs import one_gpu_cases

    cases = [c for c in one_gpu_cases("cuda:0") if c.schedule in ("1f1b", "stale", "zb-v", "interleaved-1f1b")]
    assert {c.model for c in cases} == {"lenet5", "resnet8"}
    _assert_match(cases, "cuda:0")


@pytest.mark.gpu
def test_memory_model_within_five_percent_of_max_memory_allocated():
    """ResNet-20, batch 128, stale weights folded on cuda:0: the predicted peak within 5% of
    torch.cuda.max_memory_allocated (the goal the campaign's memory step reports)."""
    from lab.gpucheck.execsteps import predicted_peaks, run_jobs
    from lab.gpucheck.jobs import memory_cases
    from lab.gpucheck.plan import MEMORY_REL_TOL

    cfg = next(c for c in memory_cases("cuda:0", dry=False) if c.schedule == "stale")
    res = run_jobs([cfg], "cuda:0", dry=False)[0]
    assert "error" not in res, res
    assert res["peak_memory_kind"] == "cuda.max_memory_allocated"
    measured, predicted = res["peak_memory_bytes"]["0"], predicted_peaks(cfg, device="cuda:0")[0]
    assert abs(predicted - measured) <= MEMORY_REL_TOL * measured, (predicted, measured)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 3, reason="needs 3 GPUs")
def test_three_stages_on_three_gpus_over_nccl():
    from lab.gpucheck.jobs import multi_gpu_cases

    cases = [c for c in multi_gpu_cases(3)[3] if c.schedule in ("stale", "1f1b", "2bw", "dp", "zb-h1", "zb-v")]
    assert all(c.num_stages >= 3 or c.workers == 3 for c in cases)
    _assert_match(cases, "cuda:0,1,2")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_virtual_stage_schedules_on_two_gpus_over_nccl():
    from lab.gpucheck.jobs import multi_gpu_cases
    from stalesim.schedule import get_spec

    cases = [c for c in multi_gpu_cases(2)[2] if get_spec(c.schedule).stages_per_device > 1]
    assert {c.schedule for c in cases} >= {"interleaved-1f1b", "zb-v", "dualpipev"}
    _assert_match(cases, "cuda:0,1")
