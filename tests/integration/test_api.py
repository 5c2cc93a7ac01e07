"""The Python API: ``import stalesim``, then profile, simulate, emulate, run (``stalesim.api``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import stalesim
from stalesim.api import spec_of
from stalesim.schedule import ScheduleConfig, build_schedule


def tiny_net():
    return nn.Sequential(nn.Sequential(nn.Flatten(), nn.Linear(9, 16), nn.ReLU()),
                         nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 3))


def tiny_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 1, 3, 3, generator=g)
    y = (x.flatten(1) @ torch.randn(9, 3, generator=g)).argmax(1)
    return TensorDataset(x[:128], y[:128]), TensorDataset(x[128:], y[128:])


def test_import_is_cheap_and_names_load_on_use():
    code = ("import sys, stalesim; assert 'torch' not in sys.modules; "
            "assert callable(stalesim.emulate) and stalesim.TrainConfig.__name__ == 'TrainConfig'; print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    with pytest.raises(AttributeError):
        stalesim.no_such_name  # noqa: B018


def test_factories_are_named_as_on_the_command_line():
    assert spec_of(tiny_net, "model") == f"{__name__}:tiny_net"
    assert spec_of("lenet5", "model") == "lenet5" and spec_of(None, "dataset") is None
    with pytest.raises(stalesim.StalesimError, match="not reachable by name"):
        spec_of(lambda: None, "model")
    with pytest.raises(stalesim.StalesimError, match="expected a name"):
        spec_of(3, "dataset")


def test_profile_simulate_emulate_in_process(tmp_path):
    prof = stalesim.profile(tiny_net, [8], dataset=tiny_data, repeats=1, warmup=0)
    assert prof.model == f"{__name__}:tiny_net" and [lp.name for lp in prof.layers] == ["block0", "block1", "block2"]
    by_name = stalesim.simulate(prof, "1f1b", stages=2, microbatches=2, batches=6)
    cfg = stalesim.simulate(prof, ScheduleConfig("1f1b", stages=2, microbatches=2, batches=6))
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(build_schedule(ScheduleConfig("1f1b", stages=2, microbatches=2, batches=6)).to_dict()))
    from_file = stalesim.simulate(prof, path)
    assert by_name.iteration_time_s == pytest.approx(cfg.iteration_time_s)
    assert from_file.iteration_time_s == pytest.approx(cfg.iteration_time_s)
    assert stalesim.simulate(prof, "stale", ppv=[1]).staleness == [2, 0]
    s = stalesim.emulate(model=tiny_net, dataset=tiny_data, schedule="stale", stages=2, iterations=6, batch_size=16)
    assert s["model"] == f"{__name__}:tiny_net" and len(s["losses"]) == 6 and s["staleness"] == [2, 0]
    f = stalesim.emulate(model=tiny_net, dataset=tiny_data, schedule_file=str(path), batch_size=16)
    r = stalesim.emulate(model=tiny_net, dataset=tiny_data, schedule="1f1b", stages=2, microbatches=2,
                         iterations=6, batch_size=16)
    assert f["schedule"] == "file:mine.json" and f["losses"] == r["losses"]


def test_config_and_argument_errors():
    cfg = stalesim.config(model=tiny_net, schedule="stale", stages=2, iterations=3)
    assert cfg.dataset == "synthetic" and cfg.model.endswith(":tiny_net")
    assert stalesim.config(model="resnet20", iterations=1).dataset == "cifar10"
    with pytest.raises(stalesim.StalesimError, match="give a config or its fields"):
        stalesim.emulate(cfg, iterations=2)
    with pytest.raises(stalesim.StalesimError, match="schedule: expected a name"):
        stalesim.simulate(None, 3)  # type: ignore[arg-type]


def three_logits():
    seq = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    seq.input_shape = (4,)
    return seq


def test_labels_the_model_cannot_predict_are_refused_up_front():
    """Synthetic data has 10 classes: a 3-logit model would fail mid-run in cross-entropy."""
    with pytest.raises(stalesim.StalesimError, match=r"^--model: .*gives 3 logits, but the labels of data set "
                                                      r"synthetic go up to class 9"):
        stalesim.emulate(model=three_logits, iterations=2)
    s = stalesim.emulate(model=three_logits, num_classes=3, iterations=2, batch_size=8)
    assert len(s["losses"]) == 2
