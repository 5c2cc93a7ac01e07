"""No silent re-timing: one rule for --target, --node and a hardware JSON (stalesim.workloads.retime)."""

import json

import pytest

from stalesim.cli import main
from stalesim.errors import StalesimError
from stalesim.workloads.hardware import get_device
from stalesim.workloads.profile import profile_from_dict, uniform_profile
from stalesim.workloads.retime import is_for_device, retime


def _profile(path, *, device="synthetic", flops=0, meta=None):
    d = uniform_profile(8, 1e-3, 2e-3, 128).to_dict()
    d["device"] = device
    if meta:
        d["meta"] = meta
    for layer in d["layers"]:
        layer["flops"] = flops
    profile_from_dict(d).to_json(path)
    return str(path)


def _run(capsys, *args):
    code = main(["simulate", *args, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


BASE = ["--schedule", "1f1b", "-S", "4", "-M", "4", "-B", "512", "-P", "8"]


def test_node_and_hardware_json_give_the_same_answer(capsys, tmp_path):
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"cluster": "dgx-h100"}))
    # a hand-written profile (times given): used as given both ways, never re-timed from FLOPs = 0
    syn = _profile(tmp_path / "s.json")
    _, a = _run(capsys, "--profile", syn, *BASE, "--node", "dgx-h100")
    _, b = _run(capsys, "--profile", syn, *BASE, "--hardware", str(hw))
    assert a["iteration_time_s"] == b["iteration_time_s"] and a["cost_source"] == b["cost_source"]
    # the given times: (M + S - 1) x 2 layers x (F + B) at a micro-batch of 16 of the profiled 128
    assert a["iteration_time_s"] >= 7 * 2 * 3e-3 * 16 / 128
    # a CPU profile with FLOPs: re-timed by the roofline both ways
    cpu = _profile(tmp_path / "c.json", device="cpu", flops=10**11)
    _, c = _run(capsys, "--profile", cpu, *BASE, "--node", "dgx-h100")
    _, d = _run(capsys, "--profile", cpu, *BASE, "--hardware", str(hw))
    assert c["iteration_time_s"] == d["iteration_time_s"] and c["cost_source"] == "roofline" == d["cost_source"]


@pytest.mark.parametrize("device,flag", [("cpu", ["--node", "dgx-h100"]), ("synthetic", ["--target", "h100-sxm"]),
                                         ("cuda:0", ["--node", "dgx-a100"])])
def test_a_profile_without_flops_is_never_retimed(capsys, tmp_path, device, flag):
    meta = {"device_name": "NVIDIA H100 80GB HBM3"} if device.startswith("cuda") else None
    p = _profile(tmp_path / "p.json", device=device, meta=meta)
    code, err = _run(capsys, "--profile", p, *BASE, *flag)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("stalesim: error: profile: its layers have no FLOPs")


def test_is_for_device():
    h100, a100, cpu = get_device("h100-sxm"), get_device("a100-80gb-sxm"), get_device("cpu-core")
    prof = uniform_profile(2, 1e-3, 1e-3, 8)
    assert is_for_device(prof, h100) and is_for_device(prof, cpu)  # synthetic: times as given
    from dataclasses import replace

    cuda = replace(prof, device="cuda:0", meta={"device_name": "NVIDIA H100 80GB HBM3"})
    assert is_for_device(cuda, h100) and not is_for_device(cuda, a100) and not is_for_device(cuda, cpu)
    assert is_for_device(replace(prof, device="cpu"), cpu) and not is_for_device(replace(prof, device="cpu"), h100)
    assert is_for_device(replace(prof, device="h100-sxm"), h100)
    assert retime(prof, h100) is prof
    with pytest.raises(StalesimError, match="no FLOPs"):
        retime(prof, h100, force=True)
