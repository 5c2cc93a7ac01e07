"""The machine calibration file: round trip, the terms it names, and bad files in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stalesim.cost.calibration import (
    FORMAT,
    FORMAT_VERSION,
    MachineCalibration,
    default_terms,
    defaults_line,
    read_calibration,
    write_calibration,
)
from stalesim.errors import StalesimError


def _fit(a: float, b: float) -> dict[str, float]:
    return {"alpha_s": a, "beta_s_per_byte": b}


def full() -> MachineCalibration:
    comm = {"post": _fit(1e-5, 1e-10), "complete": _fit(2e-5, 0.0), "ar_post": _fit(3e-5, 0.0),
            "ar_complete": _fit(4e-5, 1e-11), "arrive": _fit(5e-5, 2e-10), "release": {"alpha_s": 1e-6},
            "lost_sender": _fit(1e-6, 0.0), "lost_receiver": _fit(2e-6, 0.0), "sizes": [64, 4096]}
    return MachineCalibration(overhead_s={"F": 1e-5, "B": 2e-5, "U": 3e-6, "LOSS": 4e-6}, dispatch_s=0.0,
                              gaps_s={"F": 5e-6, "comm": 2e-6}, comm=comm, host_cores=4, threads=1,
                              device="cpu", source="calibrate")


def test_round_trip(tmp_path: Path) -> None:
    cal = full()
    write_calibration(tmp_path / "c.json", cal)
    data = json.loads((tmp_path / "c.json").read_text())
    assert (data["format"], data["format_version"]) == (FORMAT, FORMAT_VERSION)
    assert read_calibration(tmp_path / "c.json") == cal


def test_the_terms_at_their_defaults_are_named() -> None:
    assert default_terms(full()) == []
    assert default_terms(MachineCalibration(host_cores=2)) == [
        "per-action runtime overhead", "executor gaps between actions", "per-message CPU cost",
        "compute a message takes"]
    no_lost = full()
    no_lost.comm = {k: v for k, v in (no_lost.comm or {}).items() if not k.startswith("lost_")}
    assert default_terms(no_lost) == ["compute a message takes"]
    assert defaults_line(full()).startswith("cost terms: all calibrated")
    assert "(0, not in --calibration): compute a message takes;" in defaults_line(no_lost)
    assert len(defaults_line(None).splitlines()) == 1


def _write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def _good() -> dict:
    return full().to_dict()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: [1, 2], "must be a JSON object"),
    (lambda d: {**d, "format": "stalesim-profile"}, "format:"),
    (lambda d: {**d, "format_version": 2}, "format_version: unsupported 2"),
    (lambda d: {**d, "overhead_s": {"F": -1.0}}, "overhead_s.F:"),
    (lambda d: {**d, "overhead_s": {"X": 1e-6}}, "overhead_s.X: unknown kind"),
    (lambda d: {**d, "overhead_s": {"F": float("nan")}}, "overhead_s.F:"),
    (lambda d: {**d, "gaps_s": [1]}, "gaps_s: expected an object"),
    (lambda d: {**d, "dispatch_s": True}, "dispatch_s:"),
    (lambda d: {**d, "host_cores": 0}, "host_cores:"),
    (lambda d: {**d, "threads": "one"}, "threads:"),
    (lambda d: {**d, "comm": {**d["comm"], "post": None}}, "comm.post:"),
    (lambda d: {**d, "comm": {k: v for k, v in d["comm"].items() if k != "complete"}}, "comm.complete: missing"),
    (lambda d: {**d, "comm": {**d["comm"], "arrive": {"alpha_s": 1e-5, "beta_s_per_byte": 1e9}}},
     "comm.arrive.beta_s_per_byte:"),
    (lambda d: {**d, "comm": "fast"}, "comm: expected"),
])
def test_a_bad_file_fails_in_one_line_naming_the_field(tmp_path: Path, mutate, field: str) -> None:
    p = _write(tmp_path, mutate(_good()))
    with pytest.raises(StalesimError) as e:
        read_calibration(p)
    msg = str(e.value)
    assert field in msg and "\n" not in msg and str(p) in msg


def test_a_missing_or_oversized_file_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read is bounded (the documents' limit, made small here): a file over it is refused
    before it is parsed."""
    import stalesim.workloads.jsondoc as jsondoc

    with pytest.raises(StalesimError, match="calibration"):
        read_calibration(tmp_path / "absent.json")
    write_calibration(tmp_path / "c.json", full())
    size = (tmp_path / "c.json").stat().st_size
    monkeypatch.setattr(jsondoc, "MAX_DOCUMENT_BYTES", size - 1)
    with pytest.raises(StalesimError) as e:
        read_calibration(tmp_path / "c.json")
    assert "\n" not in str(e.value) and "c.json" in str(e.value)


def test_an_unreadable_calibration_is_never_written(tmp_path: Path) -> None:
    bad = full()
    bad.host_cores = -3
    with pytest.raises(StalesimError, match="host_cores"):
        write_calibration(tmp_path / "c.json", bad)
    assert not (tmp_path / "c.json").exists()
