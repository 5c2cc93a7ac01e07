"""What a rank sets up for a CUDA job, checked on the CPU: deterministic mode and the
allocator peak it reports (faked allocator counters)."""

from __future__ import annotations

import pytest
import torch

from stalesim.executor.job import CUBLAS_DETERMINISTIC, CudaPeak, prepare_determinism


@pytest.fixture
def restore_determinism():
    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    yield
    torch.use_deterministic_algorithms(was[0], warn_only=was[1])


def test_deterministic_cuda_job_sets_cublas_workspace_and_warn_only(restore_determinism):
    env: dict[str, str] = {}
    got = prepare_determinism(True, torch.device("cuda:0"), env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_DETERMINISTIC == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert got == {"deterministic": True, "warn_only": True, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def test_a_deterministic_cublas_setting_of_the_user_is_kept(restore_determinism):
    env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    prepare_determinism(True, torch.device("cuda:0"), env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    env = {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}  # not deterministic: replaced
    prepare_determinism(True, torch.device("cuda:0"), env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_cpu_jobs_are_strict_and_touch_no_environment(restore_determinism):
    env: dict[str, str] = {}
    prepare_determinism(True, torch.device("cpu"), env)
    assert env == {}
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    prepare_determinism(False, torch.device("cuda:0"), env)  # a later job of the same worker
    assert env == {} and not torch.are_deterministic_algorithms_enabled()


class _FakeAllocator:
    """torch.cuda's allocated / peak counters."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    def alloc(self, n: int) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def free(self, n: int) -> None:
        self.now -= n


def test_cuda_peak_counts_from_setup_and_leaves_checkpoint_hooks_out(monkeypatch):
    fake = _FakeAllocator()
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: fake.peak)

    def reset(device=None):
        fake.peak = fake.now

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    fake.alloc(1000)  # setup: the model built, moved, a spike
    fake.free(900)
    peak = CudaPeak(torch.device("cuda:0"))
    assert peak.setup_peak == 1000

    def checkpoint(i: int) -> None:  # the state copies of a checkpoint write
        fake.alloc(5000)
        fake.free(5000)

    hook = peak.around(checkpoint)
    fake.alloc(300)  # training
    hook(0)
    fake.free(250)
    hook(1)
    fake.alloc(20)
    assert peak.peak() == 100 + 300  # since setup, without the 5000-byte checkpoint spikes
