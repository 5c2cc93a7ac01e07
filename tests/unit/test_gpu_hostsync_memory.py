"""On a GPU: no host synchronisation in the emulator's steady state, the executor's CUDA
peak counted from the end of setup, and the memory model with its CUDA term within 5% of
the allocator's peak (skipped without CUDA: marked ``gpu``).

Written and checked on the CPU only (no GPU in the session that wrote them): the CPU twins
are tests/integration/test_emulator_hostsync.py, tests/unit/test_executor_cuda_setup.py and
tests/unit/test_sim_memory.py.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from stalesim.emulator.replay import Emulator  # noqa: E402
from stalesim.executor import make_job, run_local  # noqa: E402
from stalesim.runtime.config import TrainConfig  # noqa: E402
from stalesim.schedule import Kind  # noqa: E402


def _cfg(**over) -> TrainConfig:
    kw = {"model": "lenet5", "dataset": "synthetic", "synthetic_size": 512, "batch_size": 32,
          "iterations": 12, "device": "cuda:0", "optimizer": "sgd", "lr": 0.02, "momentum": 0.9}
    kw.update(over)
    return TrainConfig(**kw).check()


@pytest.mark.gpu
@pytest.mark.parametrize("over", [
    {"schedule": "pipedream", "stages": 3, "clip_grad_norm": 0.5},
    {"schedule": "1f1b", "stages": 2, "microbatches": 2, "optimizer": "adamw", "lr": 1e-3,
     "weight_decay": 0.1, "weight_prediction": True},
])
def test_emulator_steady_state_has_no_host_sync(over):
    """``torch.cuda.set_sync_debug_mode('error')`` raises on any synchronising call; the
    first batches (lazy allocations: optimizer state, library handles) run outside it."""
    emu = Emulator(_cfg(**over), read_every=10**6, progress=False)
    emu._t0 = time.perf_counter()
    emu._metrics_fh = None
    steps = emu.steps
    warm = next(i for i, a in enumerate(steps) if a.kind is Kind.F and a.batch == 4)
    for a in steps[:warm]:
        emu._step(a)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for a in steps[warm:]:
            emu._step(a)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    emu._read_out()
    assert len(emu.state.losses) == emu.total
    assert all(v == v for v in emu.state.losses.values())


@pytest.mark.gpu
def test_executor_peak_counts_from_setup_without_checkpoint_writes(tmp_path):
    cfg = replace(_cfg(schedule="sequential", stages=1), device="cpu")
    plain = run_local(make_job(cfg), "cuda:0", timeout_s=180)
    ck = run_local(make_job(cfg, out=str(tmp_path / "run"), checkpoint_every=2), "cuda:0", timeout_s=180)
    peak, with_ck = plain["peak_memory_bytes"]["0"], ck["peak_memory_bytes"]["0"]
    assert peak > 0 and plain["setup_peak_memory_bytes"]["0"] > 0
    # the same training allocations; the checkpoint writes' copies are not counted
    assert abs(with_ck - peak) <= 0.01 * peak


@pytest.mark.gpu
def test_memory_model_with_cuda_term_within_5_percent_resnet20_folded():
    from stalesim.runtime.optim import state_copies
    from stalesim.schedule import build_schedule
    from stalesim.sim.memory import memory_report
    from stalesim.sim.model import uniform_costs
    from stalesim.validate.costmodel import measured_memory_facts, with_memory_facts

    cfg = _cfg(model="resnet20", schedule="gpipe", stages=3, fold=1, microbatches=2, batch_size=64,
               iterations=6, device="cpu")
    res = run_local(make_job(cfg), "cuda:0", timeout_s=300)
    measured = res["peak_memory_bytes"]["0"]
    sched = build_schedule(cfg.schedule_config(cfg.iterations))
    assert sched.num_devices == 1
    facts = measured_memory_facts(cfg, sched, device="cuda:0")
    costs = with_memory_facts(uniform_costs(sched.stages, 1, 1, batch_size=cfg.batch_size,
                                            action_batch=sched.action_batch_size(cfg.batch_size)), facts)
    costs = replace(costs, msg_bytes=tuple(f["message"] for f in facts))
    extra = (costs.transient_table(), costs.library_bytes)
    assert costs.library_bytes > 0 and costs.transient_table()["B"][0] > 0  # cuBLAS's workspaces, cuDNN's
    predicted = memory_report(sched, costs, optimizer_state_factor=state_copies(cfg)).peak_bytes[0]
    without = memory_report(sched, replace(costs, transient_bytes=(), library_bytes=0),
                            optimizer_state_factor=state_copies(cfg)).peak_bytes[0]
    assert abs(predicted - measured) <= 0.05 * measured, (predicted, measured, without, extra)
