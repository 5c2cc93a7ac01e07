"""stalesim.runtime.devio: uploads, one-go reads and lazily read loss sums."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from _hostsync import count_host_reads

from stalesim.runtime.devio import LossSums, read_values, to_device, upload
from stalesim.runtime.optim import clip_


def test_upload_rounds_as_torch_tensor_does():
    vals = [0.1, 1 / 3, 1e-8]
    for dtype in (torch.float32, torch.float64):
        got = upload(vals, dtype, torch.device("cpu"))
        assert torch.equal(got, torch.tensor(vals, dtype=dtype))
    assert upload([True, False], torch.bool, torch.device("cpu")).tolist() == [True, False]


def test_to_device_on_cpu_is_tensor_to():
    x = torch.arange(6.0)
    assert to_device(x, torch.device("cpu")) is x


def test_read_values_groups_by_dtype_and_keeps_order():
    ts = [torch.tensor(1.5), torch.tensor([2, 3]), torch.tensor([0.25, 0.5], dtype=torch.float64),
          torch.tensor(7)]
    with count_host_reads() as calls:
        got = read_values(ts)
    assert got == [[1.5], [2, 3], [0.25, 0.5], [7]]
    assert len(calls) == 3  # float32, int64, float64: one read each


def test_loss_sums_equal_python_float_sums_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    vals = [(k % 3, torch.rand((), generator=g) * 10 ** (k % 5)) for k in range(40)]
    ref: defaultdict[int, float] = defaultdict(float)
    sums = LossSums()
    for key, v in vals:
        ref[key] += float(v)
        sums.add(key, v)
    assert dict(sums) == dict(ref)
    assert sorted(sums.items()) == sorted(ref.items()) and len(sums) == 3
    sums.add(0, torch.tensor(1.0))
    sums.update({5: 2.0})
    assert sums[0] == ref[0] + 1.0 and sums[5] == 2.0


def test_clip_reads_nothing_and_leaves_small_gradients_bitwise():
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(5, 3, generator=g), torch.randn(3, generator=g)]
    big = [x.clone() for x in grads]
    with count_host_reads() as calls:
        norm = clip_(big, 0.1)
    assert calls == []
    ref = [x.clone() for x in grads]
    coef = 0.1 / (float(norm) + 1e-6)
    for r in ref:
        r.mul_(coef)  # the Python-float rule
    assert all(torch.equal(a, b) for a, b in zip(big, ref))
    small = [x * 1e-4 for x in grads]
    kept = [x.clone() for x in small]
    clip_(small, 0.1)
    assert all(torch.equal(a, b) for a, b in zip(small, kept))


def test_clip_of_a_nan_norm_leaves_the_gradients():
    grads = [torch.tensor([float("nan"), 1.0]), torch.tensor([2.0])]
    clip_(grads, 0.1)
    assert grads[1].item() == 2.0 and grads[0][1].item() == 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_int8_compression_unchanged(dtype):
    from stalesim.runtime.mitigations import compress

    g = torch.Generator().manual_seed(3)
    t = torch.randn(50, generator=g).to(dtype)
    amax = t.abs().max()
    scale = amax / 127.0
    ref = torch.clamp(torch.round(t / scale), -127, 127).to(torch.int8).to(dtype) * scale
    with count_host_reads() as calls:
        got = compress(t, "int8")
    assert calls == [] and torch.equal(got, ref)
    z = torch.tensor([0.0, -0.0], dtype=dtype)
    got = compress(z, "int8")
    assert torch.equal(got, z) and got.data_ptr() != z.data_ptr()  # a copy, as before
    assert torch.equal(torch.signbit(got), torch.signbit(z))
    inf = torch.tensor([1.0, float("inf")], dtype=dtype)
    assert torch.equal(compress(inf, "int8"), inf)
