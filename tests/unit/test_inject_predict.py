"""Weight prediction in a user's loop: the directions kept per version, and what it refuses.
(Its equality with the emulator is in tests/integration/test_inject_pipeline.py.)"""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _losses(weight_prediction: bool, schedule: str = "pipedream") -> tuple[list[float], StalePipeline]:
    net = _net()
    pipe = StalePipeline(net, schedule, steps=6, split=["0", "2"], weight_prediction=weight_prediction)
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9))
    out = []
    for t in range(6):
        x = torch.linspace(-1, 1, 8).reshape(2, 4) * (t + 1)
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out, pipe


def test_prediction_changes_the_stale_forwards_only():
    plain, _ = _losses(False)
    pred, pipe = _losses(True)
    assert pred[:2] == plain[:2]  # no momentum before the first update, then no delay to predict over
    assert all(a != b for a, b in zip(pred[2:], plain[2:]))
    assert pipe.versions_match()
    # a direction is dropped once no later pass reads its version: none is left after the last step
    assert pipe.predict is not None and pipe.predict.dirs == [{}, {}]


@pytest.mark.parametrize(("make", "message"), [
    (lambda ps: torch.optim.RMSprop(ps), "weight_prediction: needs SGD, Adam or AdamW (their next step is "
                                         "defined), got RMSprop"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1), "weight_prediction: with SGD it extrapolates along the momentum"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True), "weight_prediction: defined for plain"),
    (lambda ps: torch.optim.Adam([{"params": ps[:2]}, {"params": ps[2:], "eps": 1e-6}]),
     "weight_prediction: param group 1 has another eps than group 0"),
])
def test_optimizers_without_a_defined_direction_are_refused(make, message):
    net = _net()
    pipe = StalePipeline(net, "stale", steps=4, split=["0", "2"], weight_prediction=True)
    with pytest.raises(StalesimError) as e:
        pipe.attach(make(list(net.parameters())))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_one_lr_per_stage():
    net = _net()
    pipe = StalePipeline(net, "pipedream", steps=4, split=["0", "2"], weight_prediction=True)
    ps = list(net.parameters())
    opt = pipe.attach(torch.optim.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5}], lr=0.1, momentum=0.9))
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    with pytest.raises(StalesimError, match=r"weight_prediction: stage 0's parameters have learning rates "
                                            r"\[0.1, 0.5\]"):
        net(torch.ones(2, 4))
