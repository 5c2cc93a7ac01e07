"""What a GPU has room for (stalesim.sim.llm_capacity): the catalog's GB read as GiB, the share the
CUDA runtime reports, the CUDA context and NCCL's ring buffers per communicator."""

from dataclasses import replace

import pytest

from stalesim.sim.llm_capacity import (
    CUDA_CONTEXT_BYTES,
    NCCL_CONNECTION_BYTES,
    communicators,
    cuda_context_bytes,
    nccl_buffer_bytes,
    physical_bytes,
    visible_bytes,
)
from stalesim.sim.llm_plan import ParallelPlan
from stalesim.workloads.hardware import get_device

GIB = 2**30


def test_an_80_gb_gpu_has_80_gib_of_which_cuda_reports_79_25():
    a100 = get_device("a100-80gb-sxm")
    assert physical_bytes(a100) == pytest.approx(80 * GIB)
    assert visible_bytes(a100) == pytest.approx(79.25 * GIB)
    # the A100 40GB's reported 39.59 GiB is within 0.1 % of the same share
    assert visible_bytes(get_device("a100-40gb-sxm")) / GIB == pytest.approx(39.59, rel=1e-3)


def test_a_cpu_keeps_its_memory_and_holds_no_context_or_buffers():
    cpu = get_device("cpu-core")
    assert physical_bytes(cpu) == visible_bytes(cpu) == cpu.memory_bytes
    assert cuda_context_bytes(cpu) == 0
    assert nccl_buffer_bytes(ParallelPlan(tp=2, dp=2), cpu) == 0


def test_nccl_buffers_by_hand():
    """Simple 4 MiB + LL128 120 x 640 x 8 x 8 + LL 8 x 512 x 8 x 16 bytes per connection; two per
    channel, 24 channels, one communicator per group of more than one rank."""
    assert NCCL_CONNECTION_BYTES == 4_194_304 + 4_915_200 + 524_288
    gpu = get_device("h100-sxm")
    assert cuda_context_bytes(gpu) == CUDA_CONTEXT_BYTES == GIB // 2
    plans = {ParallelPlan(): 0, ParallelPlan(dp=8): 1, ParallelPlan(tp=8, dp=4): 2,
             ParallelPlan(tp=8, pp=4, dp=2, cp=2): 4}
    for plan, n in plans.items():
        assert communicators(plan) == n
        assert nccl_buffer_bytes(plan, gpu) == n * 24 * 2 * NCCL_CONNECTION_BYTES
    # about 0.43 GiB per communicator
    assert nccl_buffer_bytes(ParallelPlan(dp=8), gpu) / GIB == pytest.approx(0.431, abs=0.001)


def test_a_stated_memory_is_read_the_same_way():
    """A source's "94 GB" device is 94 GiB of memory, as the catalog's figures are."""
    h100 = get_device("h100-sxm")
    assert physical_bytes(replace(h100, memory_bytes=94e9)) == pytest.approx(94 * GIB)
