"""The profiler measures real, positive times and sane byte counts (lenet5, tiny batch)."""

from __future__ import annotations

import pytest
import torch

from stalesim.errors import StalesimError
from stalesim.workloads.profiler import parse_device, parse_dtype, profile_model


@pytest.fixture(scope="module")
def lenet_profile():
    return profile_model("lenet5", [8, 16], repeats=2, warmup=1, threads=1)


def test_profile_lenet5_values(lenet_profile) -> None:
    p = lenet_profile
    assert p.model == "lenet5" and p.device == "cpu" and p.dtype == "float32"
    assert p.batch_size == 8 and p.repeats == 2 and p.threads == 1
    assert [lp.name for lp in p.layers] == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    assert p.weight_layers == [1, 1, 1, 1, 1]
    for lp in p.layers:
        assert lp.forward_s > 0 and lp.backward_s > 0 and lp.update_s > 0
        assert lp.spread is not None
        assert lp.spread["forward_s"]["min"] <= lp.forward_s <= lp.spread["forward_s"]["max"]
    # exact byte counts for batch 8
    assert [lp.param_bytes for lp in p.layers] == [624, 9664, 192480, 40656, 3400]
    assert [lp.output_bytes for lp in p.layers] == [8 * 6 * 14 * 14 * 4, 8 * 16 * 5 * 5 * 4,
                                                    8 * 120 * 4, 8 * 84 * 4, 8 * 10 * 4]
    # conv1 saves its input, the ReLU output and the int64 max-pool indices
    assert p.layers[0].saved_bytes == 8 * 784 * 4 + 8 * 6 * 784 * 4 + 8 * 6 * 196 * 8
    # forward FLOPs: 2 * MACs
    assert p.layers[0].flops == 2 * 8 * 6 * 28 * 28 * 25
    assert p.layers[2].flops == 2 * 8 * 400 * 120
    # block 0 needs no input gradient: backward FLOPs = forward; others ~2x
    assert p.layers[0].backward_flops == p.layers[0].flops
    assert p.layers[2].backward_flops == 2 * p.layers[2].flops
    assert p.whole_model_s is not None and p.whole_model_s > 0
    assert p.sum_over_whole_ratio == pytest.approx(sum(p.costs()) / p.whole_model_s)


def test_profile_several_batch_sizes(lenet_profile) -> None:
    p = lenet_profile
    assert [b.batch_size for b in p.by_batch_size] == [8, 16]
    q = p.at_batch_size(16)
    assert q.layers[0].output_bytes == 2 * p.layers[0].output_bytes
    assert q.layers[0].flops == 2 * p.layers[0].flops
    from stalesim.workloads.profile import profile_from_dict

    assert profile_from_dict(p.to_dict()) == p


def test_profile_does_not_leak_threads_or_rng() -> None:
    before = torch.get_num_threads()
    state = torch.get_rng_state()
    profile_model("lenet5", 2, repeats=1, warmup=0, threads=1)
    assert torch.get_num_threads() == before
    assert torch.equal(torch.get_rng_state(), state)


def test_profile_bad_inputs() -> None:
    with pytest.raises(StalesimError, match="unknown model"):
        profile_model("nope", 8)
    with pytest.raises(StalesimError, match="batch_size"):
        profile_model("lenet5", 0)
    with pytest.raises(StalesimError, match="device"):
        parse_device("tpu")
    with pytest.raises(StalesimError, match="dtype"):
        parse_dtype("float8")
    if not torch.cuda.is_available():
        with pytest.raises(StalesimError, match="no CUDA device"):
            parse_device("cuda:0")


@pytest.mark.gpu
def test_profile_cuda_events() -> None:
    p = profile_model("lenet5", 8, repeats=2, warmup=1, device="cuda")
    assert p.device == "cuda:0" and p.meta["timer"] == "cuda-events"
    assert all(lp.forward_s > 0 for lp in p.layers)


def test_profile_bfloat16_halves_bytes(lenet_profile) -> None:
    p = profile_model("lenet5", 8, repeats=1, warmup=0, dtype="bfloat16", threads=1)
    assert p.dtype == "bfloat16"
    assert [lp.param_bytes * 2 for lp in p.layers] == [lp.param_bytes for lp in lenet_profile.layers]
    assert [lp.output_bytes * 2 for lp in p.layers] == [
        lp.output_bytes for lp in lenet_profile.layers
    ]


def test_profile_measures_the_split_backward(lenet_profile) -> None:
    """I (input gradient) and W (weight gradient) per block, as the stage runtime runs them
    (the first block's input needs no gradient: its I is empty, its W the whole backward)."""
    for lp in lenet_profile.layers:
        assert lp.measured_split
        assert lp.backward_weight_s > 0 and lp.backward_input_s > 0
        assert set(lp.spread) >= {"backward_input_s", "backward_weight_s"}
    back = lenet_profile.from_dict(lenet_profile.to_dict())
    assert [lp.backward_split() for lp in back.layers] == [lp.backward_split() for lp in lenet_profile.layers]


class _FakeStream:
    def __init__(self, device: torch.device) -> None:
        self.device = device


class _FakeEvent:
    def __init__(self, log: list, enable_timing: bool) -> None:
        self.log, self.stream = log, None
        assert enable_timing

    def record(self, stream=None) -> None:
        self.stream = stream
        self.log.append(("record", stream))

    def elapsed_time(self, other: _FakeEvent) -> float:
        return 2.5  # ms


class _FakeCuda:
    """The three torch.cuda calls the timer makes, recorded (runs without a GPU)."""

    def __init__(self) -> None:
        self.log: list = []

    def current_stream(self, device: torch.device) -> _FakeStream:
        self.log.append(("current_stream", device))
        return _FakeStream(device)

    def Event(self, enable_timing: bool = False) -> _FakeEvent:  # noqa: N802 - torch's name
        return _FakeEvent(self.log, enable_timing)

    def synchronize(self, device: torch.device) -> None:
        self.log.append(("synchronize", device))


def test_timer_records_on_the_profiled_gpus_stream() -> None:
    """Events go on cuda:1's stream and cuda:1 is synchronized, whatever device is current
    (an event recorded without a stream would land on the current device's)."""
    from stalesim.workloads.profiler import _Timer

    fake = _FakeCuda()
    dev = torch.device("cuda", 1)
    timer = _Timer(dev, cuda_api=fake)
    sink: list[float] = []
    assert timer.time(sink, lambda: 7) == 7
    timer.flush()
    records = [s for op, s in fake.log if op == "record"]
    assert len(records) == 2 and all(s is not None and s.device == dev for s in records)
    assert ("current_stream", dev) in fake.log and ("synchronize", dev) in fake.log
    assert sink == [0.0025]


def test_profiling_runs_with_the_gpu_current() -> None:
    from stalesim.workloads.profiler import _on_device

    ctx = _on_device(torch.device("cuda", 3))
    assert isinstance(ctx, torch.cuda.device) and ctx.idx == 3  # entered only around the measurement
    with _on_device(torch.device("cpu")):
        pass


def test_precision_in_force_follows_torchs_switches() -> None:
    from stalesim.workloads.profiler import precision_in_force

    defaults = {"cudnn.enabled": True, "cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": False,
                "float32_matmul_precision": "highest"}  # torch's defaults
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    p = precision_in_force(cuda, torch.float32, defaults)
    assert (p.conv_tf32, p.matmul_tf32, p.autocast) == (True, False, None)
    p = precision_in_force(cuda, torch.float32, {**defaults, "float32_matmul_precision": "high"})
    assert (p.conv_tf32, p.matmul_tf32) == (True, True)
    p = precision_in_force(cuda, torch.float32, {**defaults, "cudnn.allow_tf32": False})
    assert (p.conv_tf32, p.matmul_tf32) == (False, False)
    assert not precision_in_force(cuda, torch.bfloat16, defaults).conv_tf32  # TF32 is float32 only
    assert not precision_in_force(cpu, torch.float32, defaults).conv_tf32  # and CUDA only


def test_profile_records_precision_and_conv_share(lenet_profile) -> None:
    p = lenet_profile
    assert p.precision is not None and not p.precision.conv_tf32 and p.precision.autocast is None
    assert p.meta["precision_flags"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert [lp.conv_flop_share for lp in p.layers] == [1.0, 1.0, 0.0, 0.0, 0.0]
    back = p.from_dict(p.to_dict())
    assert back.precision == p.precision
    assert [lp.conv_flop_share for lp in back.layers] == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.gpu
def test_profile_on_the_last_gpu_times_that_gpu() -> None:
    """On the last visible GPU (not the current one when there are several): real kernel
    times, recorded TF32 precision as torch has it, and the device named."""
    last = torch.cuda.device_count() - 1
    before = torch.cuda.current_device()
    p = profile_model("lenet5", 64, repeats=3, warmup=1, device=f"cuda:{last}")
    assert torch.cuda.current_device() == before  # the device context was left
    assert p.device == f"cuda:{last}" and p.meta["timer"] == "cuda-events"
    assert all(0 < lp.forward_s < 1.0 and 0 < lp.backward_s < 1.0 for lp in p.layers)
    assert p.precision is not None
    assert p.precision.conv_tf32 == bool(torch.backends.cudnn.allow_tf32)
    assert p.precision.matmul_tf32 == (torch.backends.cuda.matmul.allow_tf32
                                       or torch.get_float32_matmul_precision() != "highest")
