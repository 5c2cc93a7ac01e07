"""What an emulation reports (stalesim.emulator.results): final evaluation, eval mode, metric keys."""

from __future__ import annotations

import torch

from stalesim.emulator.results import eval_model, final_epochs, metric_key
from stalesim.runtime.config import TrainConfig

ITER = TrainConfig(model="lenet5", dataset="synthetic", iterations=4)
EPOCHS = TrainConfig(model="lenet5", dataset="synthetic", epochs=2)


def test_final_evaluation_added_only_when_the_run_did_not_end_on_an_epoch() -> None:
    calls: list[int] = []

    def metrics() -> dict[str, float | None]:
        calls.append(1)
        return {"test_accuracy": 0.75}

    # an iteration-based run: a final record after the epochs
    assert final_epochs("classify", ITER, [], False, metrics) == [{"epoch": None, "test_accuracy": 0.75}]
    # an epoch-based run that ended on an evaluated epoch: nothing to add, nothing evaluated
    done = [{"epoch": 1, "test_accuracy": 0.5}]
    assert final_epochs("classify", EPOCHS, done, False, metrics) == done and len(calls) == 1
    # diverged: never evaluated
    assert final_epochs("classify", ITER, [], True, metrics) == [] and len(calls) == 1
    # a language model's metric is the validation loss
    assert metric_key("lm") == "val_loss" and metric_key("classify") == "test_accuracy"


def test_eval_model_runs_the_stages_in_eval_mode_then_train_mode_again() -> None:
    drop = torch.nn.Dropout(0.5)
    lin = torch.nn.Linear(3, 3)
    with eval_model([lin, drop]) as forward:
        x = torch.ones(2, 3)
        assert not drop.training and torch.equal(forward(x), lin(x))
    assert drop.training and lin.training
