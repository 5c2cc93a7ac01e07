"""TrainConfig validation names the bad field; lr schedules."""

from __future__ import annotations

import pytest

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig


@pytest.mark.parametrize("kw,field", [
    (dict(dataset="imagenet"), "dataset"),
    (dict(schedule="nope"), "schedule"),
    (dict(lr=-1.0), "lr"),
    (dict(momentum=1.0), "momentum"),
    (dict(batch_size=0), "batch_size"),
    (dict(schedule="dp", workers=3, batch_size=128), "batch_size"),
    (dict(schedule="gpipe", microbatches=3, batch_size=128), "batch_size"),
    (dict(schedule="stale", workers=2), "workers"),
    (dict(schedule="stale", microbatches=2), "microbatches"),
    (dict(schedule="stale", compression="fp16"), "compression"),
    (dict(schedule="pipe-sgd", workers=2, compression="zip"), "compression"),
    (dict(lr_schedule="poly"), "lr_schedule"),
    (dict(dtype="bf16"), "dtype"),
    (dict(ppv=[2], stages=3), "stages"),
    (dict(epochs=None), "iterations/epochs"),
    (dict(iterations=5), "iterations/epochs"),
    (dict(switch=3), "switch"),
    (dict(device="tpu"), "device"),
])
def test_bad_fields_are_named(kw, field):
    base = dict(epochs=1)
    base.update(kw)
    with pytest.raises(StalesimError) as exc:
        TrainConfig(**base).check()
    assert str(exc.value).startswith(field), str(exc.value)


def test_good_config_and_roundtrip():
    cfg = TrainConfig(schedule="pipe-sgd", workers=2, batch_size=64, compression="int8", epochs=2).check()
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert TrainConfig(ppv=[2, 4], epochs=1).check().num_stages == 3
    with pytest.raises(StalesimError, match="^bogus"):
        TrainConfig.from_dict({"bogus": 1})


def test_lr_schedules():
    c = TrainConfig(lr=1.0, epochs=1, lr_schedule="step")
    assert [c.lr_at(t, 100) for t in (0, 49, 50, 74, 75, 99)] == pytest.approx([1, 1, .1, .1, .01, .01])
    c.lr_schedule = "cosine"
    assert c.lr_at(0, 100) == 1.0 and c.lr_at(50, 100) == pytest.approx(0.5)
    c.lr_schedule = "constant"
    assert c.lr_at(99, 100) == 1.0
