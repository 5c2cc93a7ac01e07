"""``--basis-rotation`` batched (K runs stacked; each run's factors decomposed and refreshed
on their own) equals the K separate runs.

Only where the rotation is well defined: a factor with a repeated eigenvalue (0 whenever a
matrix's side exceeds the rank of its gradient statistics: LeNet's 120 x 400 layer at batch
8) has eigenvectors that are any basis of that space, and the batched and the separate
computations, which differ by rounding, pick different ones (measured with every side
rotated: losses part by up to 37% (LeNet) and 0.9% (this GPT) within five updates). So
the runs here are the small GPT (128 tokens a batch) with only the sides of 16 (= n_embd)
rotated (``basis_rotation_max_dim`` 16), whose factors are of full rank."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_emulator_batched import TINY, _compare

from stalesim.runtime.config import TrainConfig


def _rot(model: str, schedule: str, dtype: str = "float64", **kw) -> list[TrainConfig]:
    d = dict(dataset="synthetic", synthetic_size=32, batch_size=8, optimizer="adamw", basis_rotation=True,  # noqa: C408
             basis_rotation_freq=2, basis_rotation_max_dim=16, lr=3e-3, eps=1e-6, weight_decay=0.1,
             schedule=schedule, stages=3, iterations=5, dtype=dtype)
    d["model"] = model if model == "lenet5" else TINY
    if model != "lenet5":
        d["eval_windows"] = 8
    if schedule == "2bw":
        d["microbatches"] = 2
    d.update(kw)
    base = TrainConfig(**d).check()
    return [replace(base, seed=0).check(),
            replace(base, seed=1, lr=1e-3, betas=[0.8, 0.99], weight_decay=1e-3).check(),
            replace(base, seed=3, basis_rotation_beta=0.5).check(),
            replace(base, seed=2, error_feedback=True, clip_grad_norm=0.5).check()]


@pytest.mark.parametrize("schedule", ["pipedream", "2bw"])
def test_float64_rotation_batched_equals_separate_runs(schedule):
    _compare(_rot("gpt", schedule), 1e-11)


def test_adam_l2_and_float32():
    # validation loss 6e-11 apart here (the eigenvectors amplify rounding; training losses 2e-13)
    _compare(_rot("gpt", "stale", optimizer="adam", weight_decay=0.01), 1e-9)
    # float32: the rotated coordinates' rounding (1e-7 of the gradient) over eps reaches the
    # step, so batched and separate runs part by ~1e-3 relative (validation loss, 5 updates)
    _compare(_rot("gpt", "stale", dtype="float32"), 1e-2)


def test_runs_of_a_batch_share_the_rotation_settings():
    from stalesim.errors import StalesimError
    from stalesim.runtime.batched import check_batch

    a = _rot("gpt", "stale")[0]
    with pytest.raises(StalesimError, match="^batched: runs 0 and 1 differ in basis_rotation_freq"):
        check_batch([a, replace(a, seed=1, basis_rotation_freq=3)])


def test_fit_estimate_counts_the_factors():
    from stalesim.runtime.batched import estimate_batch_bytes
    from stalesim.schedule import build_schedule
    from stalesim.schedule.liveness import stage_liveness

    cfg = _rot("gpt", "stale")[0]
    live = [lv for lv in stage_liveness(build_schedule(cfg.schedule_config(4))) if lv.worker == 0]
    kw = dict(runs=3, stage_params=[10, 20, 30], act_per_sample=[0, 0, 0], micro_batch=1,  # noqa: C408
              liveness=live, cfgs=[cfg], element_size=8)
    plain = estimate_batch_bytes(**kw)["total"]
    assert estimate_batch_bytes(**kw, extra_state=[100, 0, 7])["total"] == plain + 3 * 107


def test_batched_state_round_trips_through_a_checkpoint():
    """Factors, bases and moments are in the batched optimizer's state dict: a copy loaded
    from it continues (across a refresh) bit for bit as the original."""
    import torch

    from stalesim.runtime.batched import BatchedOptimizer

    cfgs = _rot("gpt", "stale")[:2]
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 5, 3), (2, 4)]
    a = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64)) for s in shapes]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(5)]
    oa = BatchedOptimizer(a, cfgs)
    for g in grads[:3]:
        oa.step([x.clone() for x in g], [1e-2, 2e-2])
    ob = BatchedOptimizer(b, cfgs)
    with torch.no_grad():
        for p, q in zip(b, a):
            p.copy_(q)
    ob.load_state_dict(oa.state_dict())
    assert set(ob.rot[0]) == {"L", "Q_L", "R", "Q_R"} and ob.rot[1] == {}
    for g in grads[3:]:  # update 4 refreshes the bases (freq 2)
        oa.step([x.clone() for x in g], [1e-2, 2e-2])
        ob.step([x.clone() for x in g], [1e-2, 2e-2])
    assert all(torch.equal(p, q) for p, q in zip(a, b))
