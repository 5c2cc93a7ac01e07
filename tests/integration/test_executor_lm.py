"""The executor reproduces the emulator for the character GPT and the new optimizers.

Same proof as ``test_executor_equivalence.py`` (one process per stage with real gloo
sends of int64 token ids at stage 0, float activations after, (B, T) next-token
labels travelling with the activations), for the language model: Shakespeare with
PipeDream-2BW and AdamW on 4 ranks (the issue's acceptance run, small sizes) and on
2 ranks, and on 2 ranks every new optimizer and optimizer-aware mitigation on
synthetic text. Losses must be equal (float32: within 1e-6 relative, bitwise so far;
float64: exactly), as must the version logs and the final validation loss.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _equivalence import check_equal

from stalesim.executor import make_job, run_local
from stalesim.runtime.config import TrainConfig

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _cfg(schedule: str, stages: int, **over) -> TrainConfig:
    kw = dict(model=TINY, dataset="synthetic", schedule=schedule, stages=stages, iterations=6,  # noqa: C408
              batch_size=8, lr=3e-3, optimizer="adamw", weight_decay=0.1, synthetic_size=32,
              eval_windows=8)
    if schedule in ("gpipe", "1f1b", "2bw"):
        kw["microbatches"] = stages
    kw.update(over)
    return TrainConfig(**kw).check()


def _check(cases: list[TrainConfig], results: list[dict]) -> None:
    assert len(results) == len(cases)
    for cfg, res in zip(cases, results):
        what = f"{cfg.schedule} S={cfg.num_stages} {cfg.optimizer} {cfg.dtype} {cfg.dataset}"
        emu = check_equal(cfg, res, what)
        tol = 0.0 if cfg.dtype == "float64" else 1e-6
        assert res["task"] == emu["task"] == "lm"
        assert res["final_val_loss"] is not None
        assert abs(res["final_val_loss"] - emu["final_val_loss"]) <= tol * emu["final_val_loss"], what
        assert res["final_val_bpc"] == pytest.approx(emu["final_val_bpc"], rel=1e-6)


def _jobs(cases: list[TrainConfig]) -> list[dict]:
    return [make_job(c, keep_rows=True, deterministic=True, label=c.schedule) for c in cases]


@pytest.mark.parametrize("ranks", [4, 2])
def test_shakespeare_2bw_adamw(real_data_dir, ranks):
    """The acceptance run at small size: 2bw, M = S, AdamW lr 3e-4, on S gloo ranks."""
    cases = [_cfg("2bw", ranks, dataset="shakespeare", data_dir=str(real_data_dir), lr=3e-4,
                  weight_decay=0.0, iterations=8)]
    _check(cases, run_local(_jobs(cases), f"cpu:{ranks}", timeout_s=60))


def test_two_ranks_new_optimizers_and_mitigations():
    cases = [
        _cfg("pipedream", 2, optimizer="adam", clip_grad_norm=0.5, lr_warmup=2, lr_schedule="cosine",
             lr_min=1e-4),
        _cfg("stale", 2, optimizer="sgd", nesterov=True, lr=0.1, weight_decay=0.01),
        _cfg("2bw", 2, error_feedback=True),
        _cfg("pipedream", 2, nesterov_lookahead=True, betas=[0.99, 0.999]),
        _cfg("stale", 2, optimizer="sgd", lr=0.1, nesterov_lookahead=True, momentum=0.9),
        _cfg("stale", 2, optimizer="adam", weight_prediction=True),
        # under stashing the backward reuses the forward's predicted weights
        _cfg("pipedream", 2, optimizer="adamw", weight_decay=0.1, weight_prediction=True),
        _cfg("2bw", 2, optimizer="sgd", lr=0.1, momentum=0.9, weight_prediction=True),
        _cfg("pipedream", 2, nesterov_lookahead=True, lookahead_momentum="constant"),
        _cfg("2bw", 2, error_feedback=True, warmup=2),
        _cfg("local", 2),
        _cfg("dp", 1, workers=2),
        _cfg("2bw", 2, dtype="float64", error_feedback=True, clip_grad_norm=1.0),
    ]
    _check(cases, run_local(_jobs(cases), "cpu:2", timeout_s=60))


def test_executor_resume_keeps_adam_and_error_feedback_state(tmp_path):
    """A run resumed from a mid-run checkpoint (Adam moments, step counts and the
    error-feedback step restored on every rank) gives the uninterrupted run's losses."""
    cases = [_cfg("2bw", 2, error_feedback=True, iterations=9),
             _cfg("pipedream", 2, nesterov_lookahead=True, betas=[0.99, 0.999], iterations=9),
             _cfg("pipedream", 2, optimizer="adam", weight_prediction=True, iterations=9)]
    outs = [str(tmp_path / f"r{i}") for i in range(len(cases))]
    full = run_local([make_job(c, out=o, checkpoint_every=4, evaluate=False) for c, o in zip(cases, outs)],
                     "cpu:2", timeout_s=60)
    resumed = run_local([make_job(c, out=o, checkpoint_every=4, resume=o, evaluate=False)
                         for c, o in zip(cases, outs)], "cpu:2", timeout_s=60)
    for cfg, a, b in zip(cases, full, resumed):
        assert b["losses"] == a["losses"], cfg.schedule
