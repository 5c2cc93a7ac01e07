"""Every rank of validate's launches gets the device ``--devices`` lists for it.

validate launches ranks in three places besides the executor: ``calibrate`` (the link),
the per-message calibration (:mod:`stalesim.validate.commcal`, two ranks) and the 1-rank
baseline. Each goes through :meth:`stalesim.devices.Devices.device_for`; NCCL refuses
two ranks on one GPU and sends device tensors only, so the GPU lists here must come back
distinct and exactly as listed, and the clock stamp commcal sends must be made on the
rank's device. Runs on CPU: the mapping is pure, ``calibrate``/``measure_comm`` are
replaced by recorders.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from stalesim.devices import parse_devices
from stalesim.errors import StalesimError
from stalesim.validate import steps
from stalesim.validate.commcal import comm_rank_devices, stamp_tensor
from stalesim.validate.config import ValidateConfig
from stalesim.workloads.calibrate import rank_devices

SPECS = {
    "cuda:0,1": ["cuda:0", "cuda:1"],
    "cuda:2,3": ["cuda:2", "cuda:3"],
    "cuda:0,1,2": ["cuda:0", "cuda:1", "cuda:2"],
    "cpu:2": ["cpu", "cpu"],
}


def _distinct_gpus(devs: list[str]) -> bool:
    gpus = [d for d in devs if d.startswith("cuda")]
    return len(set(gpus)) == len(gpus)


@pytest.mark.parametrize("spec", list(SPECS))
def test_commcal_ranks_are_the_first_two_listed_devices(spec: str) -> None:
    got = comm_rank_devices(spec)
    assert got == SPECS[spec][:2] and _distinct_gpus(got)
    assert comm_rank_devices(parse_devices(spec)) == got


def test_commcal_needs_two_ranks() -> None:
    with pytest.raises(StalesimError, match="needs 2 ranks"):
        comm_rank_devices("cuda:3")


@pytest.mark.parametrize("spec", list(SPECS))
def test_calibrate_ranks_are_the_listed_devices(spec: str) -> None:
    devs = parse_devices(spec)
    got = rank_devices(devs.backend, devs.count, devs)
    assert got == SPECS[spec] and _distinct_gpus(got)


def test_calibrate_default_and_mismatches() -> None:
    assert rank_devices("nccl", 3) == ["cuda:0", "cuda:1", "cuda:2"]  # the CLI without --devices
    assert rank_devices("gloo", 2) == ["cpu", "cpu"]
    with pytest.raises(StalesimError, match="needs cuda ranks"):
        rank_devices("nccl", 2, parse_devices("cpu:2"))
    with pytest.raises(StalesimError, match="has 3"):
        rank_devices("nccl", 2, parse_devices("cuda:0,1,2"))


@pytest.mark.parametrize("spec", list(SPECS))
def test_validate_calibration_step_hands_every_rank_its_device(spec: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate_step passes the run's devices to both calibrations; through the mapping each
    rank they start is the listed device (and the baseline is rank 0's)."""
    import stalesim.validate.commcal as commcal
    import stalesim.validate.costmodel as costmodel
    import stalesim.workloads.calibrate as calibrate

    seen: dict[str, Any] = {}

    def fake_calibrate(backend: str, ranks: int, **kw: Any) -> dict[str, Any]:
        seen["calibrate"] = rank_devices(backend, ranks, kw.get("devices"))
        return {"schema_version": 1, "device": "h100-sxm", "link": "ideal"}

    def fake_measure_comm(sizes: Any, **kw: Any) -> dict[str, Any]:
        seen["commcal"] = comm_rank_devices(kw["devices"])
        return {"device": seen["commcal"][0]}

    monkeypatch.setattr(calibrate, "calibrate", fake_calibrate)
    monkeypatch.setattr(commcal, "measure_comm", fake_measure_comm)
    monkeypatch.setattr(costmodel, "link_from_comm", lambda hw, *a, **k: hw)
    devs = parse_devices(spec)
    v = steps.Validation(cfg=ValidateConfig(devices=spec), devs=devs, schedules=["sequential"], out=tmp_path,
                         say=lambda _m: None, cm=SimpleNamespace(comm=None))
    steps.calibrate_step(v)
    assert seen["calibrate"] == SPECS[spec] and _distinct_gpus(seen["calibrate"])
    assert seen["commcal"] == SPECS[spec][:2] and _distinct_gpus(seen["commcal"])
    assert v.device0 == SPECS[spec][0] == devs.first(1).device_for(0)  # profile, baseline, emulation


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_stamp_is_made_on_the_ranks_device(device: str) -> None:
    s = stamp_tensor(torch.device(device))  # "meta" stands in for a GPU: not the CPU default
    assert s.device.type == device and s.dtype == torch.float64 and s.shape == (1,)


@pytest.mark.gpu
def test_the_stamp_lives_on_the_given_gpu() -> None:
    last = torch.cuda.device_count() - 1
    s = stamp_tensor(torch.device("cuda", last))
    assert s.is_cuda and s.device.index == last


@pytest.mark.parametrize("argv,want", [
    (["--devices", "cuda:2,3"], ("nccl", ["cuda:2", "cuda:3"])),
    (["--devices", "cuda:0,1,2"], ("nccl", ["cuda:0", "cuda:1", "cuda:2"])),
    (["--devices", "cpu:3"], ("gloo", ["cpu", "cpu", "cpu"])),
    (["--backend", "nccl", "--ranks", "2"], ("nccl", ["cuda:0", "cuda:1"])),  # no --devices: GPUs 0..1
])
def test_calibrate_cli_calibrates_the_listed_devices(argv: list[str], want: tuple[str, list[str]],
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stalesim calibrate --devices cuda:2,3`` starts its NCCL ranks on GPUs 2 and 3 (four GPUs
    pretended visible; the spawning ``calibrate`` replaced by a recorder)."""
    import stalesim.workloads.calibrate as calibrate
    from stalesim.cli import main

    seen: dict[str, Any] = {}

    def fake(backend: str, ranks: int, **kw: Any) -> dict[str, Any]:
        seen["got"] = (backend, rank_devices(backend, ranks, kw.get("devices")))
        raise StalesimError("stop here")  # nothing to write

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(calibrate, "calibrate", fake)
    assert main(["calibrate", *argv, "-o", str(tmp_path / "hw.json")]) == 2
    assert seen["got"] == want


@pytest.mark.parametrize("argv,pattern", [
    (["--devices", "cuda:2,3", "--backend", "gloo"], "--devices: cuda:2,3 means 2 nccl"),
    (["--devices", "cpu:2", "--ranks", "3"], "--devices: cpu:2 means 2 gloo"),
    (["--devices", "cuda:3,4"], "ranks: 2 NCCL ranks need GPUs 3, 4, 4 visible"),
    (["--devices", "cpu:1"], "ranks: need an integer >= 2"),
])
def test_calibrate_cli_device_errors_are_one_line(argv: list[str], pattern: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from stalesim.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert main(["calibrate", *argv, "-o", str(tmp_path / "hw.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and pattern in err[0], err
