"""The emulator with the character GPT: summary metrics, learning, exact resume, CLI errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
from _cli import run_cli

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _cfg(schedule: str = "2bw", **kw) -> TrainConfig:
    base = dict(model=TINY, dataset="synthetic", schedule=schedule, stages=3, iterations=12,  # noqa: C408
                batch_size=8, lr=3e-3, optimizer="adamw", weight_decay=0.1, synthetic_size=32,
                eval_windows=8)
    if schedule in ("gpipe", "1f1b", "2bw"):
        base["microbatches"] = 2
    base.update(kw)
    return TrainConfig(**base).check()


def test_summary_reports_validation_nats_and_bits_per_character():
    s = Emulator(_cfg(), progress=False).run()
    assert s["task"] == "lm" and s["optimizer"] == "adamw"
    assert s["final_test_accuracy"] is None
    assert s["final_val_loss"] > 0 and s["final_val_bpc"] == pytest.approx(s["final_val_loss"] / math.log(2))
    assert s["staleness_ir"] == [1, 1, 1] and s["versions_match_ir"]
    # fresh model: the loss starts near ln(128) (uniform over the ASCII vocabulary)
    assert abs(s["losses"][0] - math.log(128)) < 0.2


def test_the_lm_learns_synthetic_text():
    s = Emulator(_cfg("sequential", stages=1, iterations=40, lr=1e-2), progress=False).run()
    assert s["final_val_loss"] < math.log(128) - 1.0, s["final_val_loss"]
    assert s["losses"][-1] < s["losses"][0] - 1.0


def test_epochs_record_validation_metrics(tmp_path):
    cfg = _cfg("stale", epochs=1, iterations=None, synthetic_size=16, batch_size=16)
    emu = Emulator(cfg, out=tmp_path, progress=False)
    s = emu.run()
    assert emu.bpe == 16 * 16 // (16 * 16)  # one epoch = train characters / (batch x block)
    ep = s["epoch_metrics"][-1]
    assert ep["epoch"] == 0 and {"val_loss", "val_bpc", "train_accuracy"} <= set(ep)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("val_loss" in rec for rec in lines)


class Interrupt(Exception):
    pass


RESUME = [
    ("2bw", {"error_feedback": True, "clip_grad_norm": 0.5}),
    ("pipedream", {"nesterov_lookahead": True, "betas": [0.99, 0.999]}),
    ("stale", {"optimizer": "adam", "weight_prediction": True, "lr_warmup": 3, "lr_schedule": "cosine"}),
    ("stale", {"optimizer": "sgd", "lr": 0.1, "nesterov": True}),
]


@pytest.mark.parametrize("schedule,kw", RESUME, ids=[f"{s}-{'-'.join(kw)}" for s, kw in RESUME])
def test_resume_is_bitwise_identical(tmp_path, schedule, kw):
    """Optimizer state (Adam moments, step count, error-feedback step) survives a checkpoint."""
    cfg = _cfg(schedule, **kw)
    full = Emulator(cfg, progress=False)
    ref = full.run()
    first = Emulator(cfg, out=tmp_path, checkpoint_every=5, progress=False)
    orig, calls = first._step, {"n": 0}
    stop = len(first.steps) * 2 // 3

    def step(a):
        calls["n"] += 1
        if calls["n"] > stop:
            raise Interrupt
        orig(a)

    first._step = step
    with pytest.raises(Interrupt):
        first.run()
    second = Emulator(cfg, out=tmp_path, checkpoint_every=5, progress=False)
    res = second.run(resume=True)
    assert res["losses"] == ref["losses"]
    for a, b in zip(second.models[0].parameters(), full.models[0].parameters()):
        assert torch.equal(a, b)
    assert res["final_val_loss"] == ref["final_val_loss"]


SYN = ["emulate", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32",
       "--batch-size", "8", "--eval-windows", "8", "--quiet", "--iterations", "4"]


def test_cli_emulate_lm_json(capsys):
    rc, out, _ = run_cli(capsys, SYN + ["--schedule", "2bw", "--stages", "2", "-M", "2",
                                     "--optimizer", "adamw", "--lr", "3e-3", "--betas", "0.9,0.95",
                                     "--clip-grad-norm", "1.0", "--lr-warmup", "2", "--json"])
    assert rc == 0
    s = json.loads(out)
    assert s["optimizer"] == "adamw" and len(s["losses"]) == 4 and s["final_val_bpc"] > 0


def test_cli_text_output_shows_bits_per_character(capsys):
    rc, out, _ = run_cli(capsys, SYN + ["--schedule", "stale", "--stages", "2", "--optimizer", "adam"])
    assert rc == 0 and "val_bpc=" in out and "val_loss=" in out


@pytest.mark.parametrize("argv,needle", [
    (["--optimizer", "lion"], "optimizer: unknown 'lion'"),
    (["--optimizer", "adamw", "--spike-compensation", "--schedule", "stale", "--stages", "2"],
     "spike_compensation"),
    (["--optimizer", "adam", "--nesterov"], "nesterov:"),
    (["--optimizer", "sgd", "--momentum", "0", "--nesterov-lookahead"], "nesterov_lookahead"),
    (["--optimizer", "sgd", "--momentum", "0", "--weight-prediction"], "weight_prediction"),
    (["--nesterov-lookahead", "--weight-prediction"], "nesterov_lookahead"),
    (["--betas", "0.9"], "--betas"),
    (["--lr-min", "0.001"], "lr_min"),
    (["--dataset", "mnist"], "dataset:"),
    (["--model", "lenet5", "--dataset", "shakespeare"], "dataset: shakespeare is text"),
    (["--model", "gpt-char:n_embd=10,n_head=3"], "n_embd 10 is not divisible"),
    (["--model", "gpt-char:depth=3"], "unknown gpt-char option 'depth'"),
    (["--clip-grad-norm", "0"], "--clip-grad-norm"),
])
def test_bad_flags_exit_2_with_one_line(capsys, argv, needle):
    rc, _, err = run_cli(capsys, SYN + argv)
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_missing_shakespeare_is_one_line_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    rc, _, err = run_cli(capsys, ["emulate", "--model", TINY, "--dataset", "shakespeare", "--data-dir",
                               str(tmp_path), "--iterations", "2", "--quiet"])
    assert rc == 2 and "dataset: shakespeare not found" in err and len(err.strip().splitlines()) == 1
