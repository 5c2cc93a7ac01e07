"""Chrome trace: valid JSON, required keys, two tracks, flows paired, IR labels."""

import json

import pytest

from stalesim.schedule import ScheduleConfig
from stalesim.sim import simulate
from stalesim.trace import TraceEvent, check_chrome_trace, chrome_trace, write_chrome_trace
from stalesim.workloads.hardware import hardware_from_catalog
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def result():
    prof = uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=1_000_000, param_bytes=1000)
    return simulate(prof, ScheduleConfig("1f1b", stages=4, microbatches=4, batches=3),
                    hardware_from_catalog("a100-80gb-sxm", "pcie4-x16"))


def test_trace_file_is_valid_chrome_trace(result, tmp_path):
    path = result.write_trace(tmp_path / "t.json")
    trace = json.loads(path.read_text())
    assert check_chrome_trace(trace) == []
    evs = trace["traceEvents"]
    phases = {e["ph"] for e in evs}
    assert {"X", "M", "s", "f"} <= phases
    xs = [e for e in evs if e["ph"] == "X"]
    for e in xs:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["tid"] in ("compute", "comm")
    names = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"device {d}" for d in range(4)}
    # flows: one s and one f per id; s on the sender's comm track, f on the receiver's
    s = {e["id"]: e for e in evs if e["ph"] == "s"}
    f = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert s.keys() == f.keys() and len(s) == 2 * 3 * 4 * 3  # (F+B) x boundaries x M x batches
    for i in s:
        assert s[i]["pid"] != f[i]["pid"] and f[i]["ts"] >= s[i]["ts"]


def test_labels_are_ir_text_without_version(result):
    events, _ = result.trace_events()
    labels = {e.name for e in events if e.tid == "compute"}
    ir = {str(a.with_version(None)) for acts in result.timeline.program.sched.device_actions
          for a in acts if a.kind.value in ("F", "B", "U", "LOSS")}
    assert labels == ir
    assert "1F0.2" in labels and "3LOSS2.3" in labels
    comm = {e.name for e in events if e.tid == "comm"}
    assert "0SEND_F0.0" in comm and "1RECV_F0.0" in comm


def test_chrome_trace_for_executor_events(tmp_path):
    evs = [TraceEvent("0F0", 0.0, 5.0, 0), TraceEvent("0SEND_F0", 5.0, 1.0, 0, "comm")]
    tr = chrome_trace(evs, metadata={"producer": "executor"})
    assert check_chrome_trace(tr) == []
    assert tr["otherData"]["producer"] == "executor"
    p = write_chrome_trace(tmp_path / "sub" / "x.json", evs)
    assert json.loads(p.read_text())["traceEvents"]
    assert not list((tmp_path / "sub").glob(".*tmp"))


def test_check_catches_unpaired_flow():
    tr = {"traceEvents": [{"name": "a", "ph": "s", "id": 1, "ts": 0, "pid": 0, "tid": "comm"}]}
    assert check_chrome_trace(tr)


def test_dp_trace_has_allreduce_on_comm_track():
    prof = uniform_profile(4, 1e-3, 2e-3, 128, param_bytes=4_000_000)
    r = simulate(prof, ScheduleConfig("dp", stages=2, workers=2, batches=2),
                 hardware_from_catalog("h100-sxm", "nvlink4"))
    tr = r.chrome_trace()
    assert check_chrome_trace(tr) == []
    ar = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["name"].endswith("AR0") and "AR" in e["name"]]
    assert {e["pid"] for e in ar} == {0, 1} and all(e["tid"] == "comm" for e in ar)
    assert any(e["name"] == "w1:1AR0" for e in ar)
