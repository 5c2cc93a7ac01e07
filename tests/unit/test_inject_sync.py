"""The wrapped loop reads no tensor on the host: on CUDA each such read would wait for the device.

No GPU is needed to check the rule: every Python-level way to bring a tensor's value to the
host (``item``, ``tolist``, ``cpu``, ``numpy``, ``bool``/``float``/``int``/``index``, which an
``if`` on a tensor calls) is counted while a few wrapped steps run, when the caller is
stalesim's own code. The user's loop and torch's optimizer are not counted: they are the
user's, with or without the pipeline.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import stalesim
from stalesim.inject import StalePipeline

HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
PACKAGE = str(Path(stalesim.__file__).parent)


@pytest.fixture
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts host reads of tensors made by stalesim's code (the caller's file in the package)."""
    counts: Counter[str] = Counter()

    def counted(name: str, own):  # noqa: ANN001, ANN202 (torch's own method, wrapped as it is)
        def read(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(PACKAGE):
                counts[f"{name} in {Path(caller).name}:{sys._getframe(1).f_lineno}"] += 1
            return own(self, *args, **kwargs)
        return read

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
    yield counts


def _net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2))


@pytest.mark.parametrize(("schedule", "options"), [
    ("stale", {"weight_prediction": True, "staleness_lr": True}),
    ("stale", {"pipemare_correction": True, "error_feedback": True}),
    ("2bw", {"microbatches": 2, "spike_compensation": True}),
    ("pipe-sgd", {"workers": 3, "compression": "int8", "pipemare_lr": True}),
])
def test_a_wrapped_step_reads_no_tensor_on_the_host(host_reads, schedule, options):
    net = _net()
    pipe = StalePipeline(net, schedule, steps=5, split=["0", "2", "4"], **options)
    opt = pipe.attach(torch.optim.SGD(pipe.param_groups(), lr=0.1, momentum=0.9, weight_decay=1e-3))
    forwards = pipe.per_step
    for t in range(5):
        for k in range(forwards):
            loss = net(torch.linspace(-1, 1, 8).reshape(2, 4) * (t + k + 1)).square().mean()
            loss.backward()
        pipe.clip_grad_norm_(0.5)
        opt.step()
        opt.zero_grad()
    assert pipe.versions_match()
    assert dict(host_reads) == {}


def test_the_counter_sees_a_host_read(host_reads):
    """Control: a read from stalesim's code is counted (the fixture can fail)."""
    from stalesim.runtime.devio import read_values

    read_values([torch.ones(())])
    assert sum(host_reads.values()) >= 1
