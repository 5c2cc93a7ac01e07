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


@pytest.mark.parametrize("kw,needle", [
    (dict(stages=1_000_000, iterations=1), "stages: 1000000 stages requested but model 'lenet5' has only 5 blocks"),
    (dict(ppv=[9], iterations=1), "ppv: 9 is out of range; model 'lenet5' has 5 weight layers"),
    (dict(model="resnet6000002", iterations=1), "deeper than this tool builds"),
    (dict(dataset="mnist", batch_size=60_001, iterations=1), "larger than the training set of mnist (60,000"),
    (dict(dataset="synthetic", synthetic_size=64, batch_size=128, iterations=1), "training set of synthetic"),
    (dict(synthetic_size=10**7, iterations=1), "synthetic_size: 10000000 is larger than this tool handles"),
    (dict(schedule="stale", stages=4, iterations=1_000_000), "actions"),
    (dict(epochs=10**5, batch_size=1), "epochs: 100000 epochs of 60,000 batches are more iterations"),
    (dict(seed=2**40, iterations=1), "seed: 1099511627776 is larger than this tool handles"),
    (dict(lr=1e300, iterations=1), "lr: expected a finite number in (0, 1e+15]"),
    (dict(lr=float("nan"), iterations=1), "lr: expected a finite number"),
    (dict(device=5, iterations=1), "device: expected str, got 5"),
    (dict(weight_prediction="yes", iterations=1), "weight_prediction: expected bool"),
    (dict(microbatches=True, iterations=1), "microbatches: expected an integer >= 1, got True"),
    (dict(model="gpt-char", dataset="shakespeare", stages=7, iterations=1),
     "stages: 7 stages requested but model 'gpt-char' has only 6 blocks"),
    (dict(model="gpt-char:n_layer=100000", dataset="shakespeare", iterations=1), "larger than this tool builds"),
    (dict(model="gpt-char", dataset="shakespeare", schedule="stale", stages=4, iterations=10**6), "actions"),
    (dict(model="gpt-char", dataset="shakespeare", schedule="stale", stages=4, epochs=10**6), "actions"),
    (dict(model="gpt-char", dataset="synthetic", synthetic_size=64, batch_size=8, epochs=10**6),
     "epochs: 1000000 epochs of 8 batches"),
])
def test_size_and_type_checks_before_anything_is_built(kw, needle):
    """Bad input: every number is checked up front, so `emulate -S 1000000` and friends are
    answered at once, naming the field, not after minutes of building."""
    with pytest.raises(StalesimError) as exc:
        TrainConfig(**kw).check()
    assert needle in str(exc.value), str(exc.value)


def test_language_model_batches_are_windows_not_samples():
    """A GPT batch is B windows sampled from the text: B larger than synthetic_size is fine."""
    TrainConfig(model="gpt-char", dataset="synthetic", synthetic_size=4, batch_size=64, iterations=2).check()
    TrainConfig(model="gpt-char:n_layer=2", dataset="shakespeare", stages=4, ppv=None, iterations=2).check()


def test_from_dict_refuses_what_is_not_an_object():
    for bad in ([], "x", None, {1: 2}):
        with pytest.raises(StalesimError, match="training config: expected a JSON object"):
            TrainConfig.from_dict(bad)  # type: ignore[arg-type]


def test_check_runnable_needs_a_zoo_model_and_a_data_folder(tmp_path):
    TrainConfig(iterations=1, data_dir=str(tmp_path)).check_runnable()
    with pytest.raises(StalesimError, match="model: unknown model 'tiny'"):
        TrainConfig(model="tiny", iterations=1).check_runnable()
    TrainConfig(model="tiny", dataset="synthetic", iterations=1).check_runnable(own_model=True)
    with pytest.raises(StalesimError, match="data_dir: .* is not a folder"):
        TrainConfig(iterations=1, data_dir=str(tmp_path / "none")).check_runnable()


def test_schedule_file_fixes_the_shape(tmp_path):
    """A user's schedule file replaces the registered schedule: its shape must be the config's,
    and build_schedule returns its order (what the emulator and the executor run)."""
    import json

    from stalesim.schedule import ScheduleConfig, build_schedule

    ours = build_schedule(ScheduleConfig("1f1b", stages=2, batches=4, microbatches=2))
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(ours.to_dict()))
    base = dict(model="lenet5", dataset="synthetic", schedule="file:mine.json", schedule_file=str(path),
                iterations=4, batch_size=8)
    cfg = TrainConfig(stages=2, microbatches=2, **base).check()
    assert cfg.build_schedule(4).device_actions == ours.device_actions
    with pytest.raises(StalesimError, match=r"^stages: 3 disagrees with the schedule file's 2"):
        TrainConfig(stages=3, microbatches=2, **base).check()
    with pytest.raises(StalesimError, match=r"^microbatches: 1 disagrees"):
        TrainConfig(stages=2, **base).check()
    with pytest.raises(StalesimError, match=r"^fold: the schedule file fixes the order"):
        TrainConfig(stages=2, microbatches=2, fold=1, **base).check()
    with pytest.raises(StalesimError, match="holds 4 batch"):
        TrainConfig(stages=2, microbatches=2, **{**base, "iterations": 5}).check()


@pytest.mark.parametrize("train, sched", [
    (dict(schedule="stale", stages=2, workers=2), dict(schedule="stale", stages=2, workers=2)),
    (dict(schedule="stale", stages=2, microbatches=2), dict(schedule="stale", stages=2, microbatches=2)),
    (dict(schedule="sequential", switch=3), dict(schedule="sequential", switch=1)),
    (dict(schedule="dp", workers=2, fold=1), dict(schedule="dp", workers=2, fold=1)),
    (dict(schedule="2bw", stages=4, microbatches=2), dict(schedule="2bw", stages=4, microbatches=2)),
    (dict(schedule="interleaved-1f1b", stages=4, stages_per_device=3, microbatches=4),
     dict(schedule="interleaved-1f1b", stages=4, stages_per_device=3, microbatches=4)),
    (dict(schedule="nope"), dict(schedule="nope")),
])
def test_schedule_rules_are_the_schedule_packages(train, sched):
    """A schedule rule broken through TrainConfig gives the schedule package's own message
    (one rule, one message, one place): TrainConfig asks, it does not repeat."""
    from stalesim.errors import ScheduleError
    from stalesim.schedule import ScheduleConfig, get_spec

    with pytest.raises(ScheduleError) as want:
        get_spec(sched["schedule"]).check(ScheduleConfig(batches=1, **sched))
    with pytest.raises(StalesimError) as got:
        TrainConfig(iterations=1, dataset="synthetic", batch_size=24, **train).check()
    assert str(got.value) == str(want.value)
    assert str(got.value).split(":")[0] in train  # names the user's flag


def test_a_registered_schedule_needs_a_run_length():
    """Only a schedule file carries its own length: building a registered schedule without one is a
    one-line error naming ``iterations``, and with one it builds that many batches."""
    cfg = TrainConfig(schedule="1f1b", stages=2, microbatches=2, batch_size=8)
    with pytest.raises(StalesimError, match=r"^iterations: schedule '1f1b' needs a run length") as exc:
        cfg.build_schedule(None)
    assert "\n" not in str(exc.value)
    assert cfg.build_schedule(3).batches == 3
