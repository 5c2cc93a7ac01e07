"""The gpu-check campaign's single-device measurements on a real GPU (marked ``gpu``: skipped
without CUDA). The executor's GPU paths are in tests/unit/test_executor_gpu.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from lab.gpucheck.plan import EVENT_WALL_REL_TOL, PROFILE_REL_TOL  # noqa: E402
from lab.gpucheck.report import Context  # noqa: E402


@pytest.mark.gpu
def test_cuda_event_profile_agrees_with_the_wall_clock(tmp_path):
    """The CUDA-event timer agrees with the host wall clock on the same isolated whole step
    (ResNet-20, the char-GPT, ResNet-20 at batch 1024), and where the step is compute-bound
    the per-block sum agrees with the whole step; the precision flags are recorded."""
    from lab.gpucheck.measure import profile_step

    o = profile_step(Context(tmp_path, dry=False, gpus=torch.cuda.device_count()))
    assert o.numbers["precision"]["tf32_conv"] in (True, False)
    bad = [(c.name, c.value) for c in o.checks if not c.ok and c.enforced]
    assert not bad, bad
    for key in ("resnet20", "gpt-char", "resnet20-b1024"):
        n = o.numbers[key]
        assert n["timer"] == "cuda-events"
        assert abs(n["events_over_wall"] - 1) <= EVENT_WALL_REL_TOL
        if n["compute_bound"]:
            assert abs(n["layer_sum_over_wall"] - 1) <= PROFILE_REL_TOL
    assert o.numbers["resnet20-b1024"]["compute_bound"], o.numbers["resnet20-b1024"]


@pytest.mark.gpu
def test_batched_emulation_equals_and_outruns_the_loop_on_the_gpu(tmp_path):
    from lab.gpucheck.measure import batched_step

    o = batched_step(Context(tmp_path, dry=False, gpus=torch.cuda.device_count()))
    assert o.numbers["K"] == 8
    assert o.numbers["max_rel_loss_diff"] <= 1e-3
    assert o.numbers["speedup"] > 1, o.numbers


@pytest.mark.gpu
def test_emulator_trains_on_the_gpu_with_finite_losses(tmp_path):
    from lab.gpucheck.measure import emulator_speed_step

    o = emulator_speed_step(Context(tmp_path, dry=False, gpus=torch.cuda.device_count()))
    assert all(c.ok for c in o.checks), o.checks
    assert o.numbers["resnet20"]["steps_per_s"] > 0 and o.numbers["gpt-char"]["steps_per_s"] > 0
