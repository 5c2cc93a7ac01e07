"""Files a user may receive from someone else (a shared results folder) run no code and fail
in one line: validate's round files are JSON, an earlier version's pickled round file is
refused unread, and crafted JSON of every wrong shape is refused before it is used."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from stalesim.errors import StalesimError
from stalesim.validate.checkpoint import FOLDER, check_timer_state, load, round_path, save_round
from stalesim.validate.config import ValidateConfig
from stalesim.validate.stagetime import LayoutTimer


class _Marker:
    """Unpickling this creates the marker file (what an attacker's payload would do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


def _payloads(marker: Path) -> list[bytes]:
    """The shapes a crafted round file took: the bare object, inside the expected document,
    behind a valid-looking format field, and through every pickle protocol."""
    m = _Marker(str(marker))
    docs: list[Any] = [m, {"format": 1, "config": m}, {"format": 2, "config": {}, "runs": {"x": m}}, [m, m]]
    return [pickle.dumps(d, protocol=p) for d in docs for p in (0, 2, pickle.HIGHEST_PROTOCOL)]


def _cfg(tmp_path: Path) -> ValidateConfig:
    return ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16, microbatches=4,
                          out=str(tmp_path), repeats=3)


def _one_line_error(tmp_path: Path) -> str:
    with pytest.raises(StalesimError) as exc:
        load(tmp_path, _cfg(tmp_path))
    text = str(exc.value)
    assert text.startswith("--resume: ") and "\n" not in text and len(text) < 400
    return text


def test_the_marker_payload_does_run_when_unpickled(tmp_path: Path) -> None:
    """The payloads are live: the standard unpickler creates the marker (so the tests below,
    where no marker appears, show the reader never unpickled them)."""
    marker = tmp_path / "ran"
    pickle.loads(_payloads(marker)[0])
    assert marker.exists()


@pytest.mark.parametrize("index", range(12))
def test_an_old_pickled_round_file_is_refused_unread(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / FOLDER / "round-0.pkl"
    path.parent.mkdir()
    path.write_bytes(_payloads(marker)[index])
    text = _one_line_error(tmp_path)
    assert "run without --resume, or delete" in text and "round-0.pkl" in text
    assert not marker.exists()
    # beside a round file of this format, it is still refused (a resume never mixes them)
    save_round(tmp_path, _cfg(tmp_path), 0, overhead_s={}, base_run={}, runs={}, timer=None)
    _one_line_error(tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize("index", range(12))
def test_a_pickle_named_as_a_json_round_file_runs_nothing(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "ran"
    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_bytes(_payloads(marker)[index])
    text = _one_line_error(tmp_path)
    assert "round-0.json" in text
    assert not marker.exists()


def _good() -> dict[str, Any]:
    return {"format": 2, "round": 0, "overhead_s": {"F": 1e-6}, "base_run": {"rows": {"0": [
        ["0F0", "F", 0, 0, None, 0, 0.0, 1e-3]]}}, "runs": {"1f1b": {"error": "x"}}, "timer": None}


def _timer(layouts: int = 1) -> dict[str, Any]:
    t = LayoutTimer([None] * layouts)
    return t.state()


@pytest.mark.parametrize(("change", "said"), [
    ({"config": None}, "'config'"),
    ({"config": "x"}, "'config' must be an object"),
    ({"round": "0"}, "'round' must be 0"),
    ({"round": False}, "'round' must be 0"),
    ({"overhead_s": {"F": "1"}}, "'overhead_s'"),
    ({"overhead_s": [1]}, "'overhead_s'"),
    ({"base_run": []}, "'base_run'"),
    ({"base_run": {"rows": {"0": [["0F0", "F", 0]]}}}, "'base_run'"),
    ({"base_run": {"rows": {"0": [["0F0", "F", -1, 0, None, 0, 0.0, 1.0]]}}}, "'base_run'"),
    ({"base_run": {"error": 3}}, "'base_run'"),
    ({"runs": {"1f1b": "fast"}}, "'runs'"),
    ({"runs": [1]}, "'runs'"),
    ({"timer": {"passes": 1}}, "'timer'"),
    ({"timer": {**_timer(), "passes": -1}}, "'timer'"),
    ({"timer": {**_timer(), "alone": [[{"F": ["slow"]}]]}}, "'timer'"),
    ({"timer": {**_timer(), "busy_wait": [[[0.001]]]}}, "'timer'"),
    ({"timer": {**_timer(2), "layouts": 3}}, "'timer'"),
])
def test_crafted_round_files_are_refused_naming_the_field(tmp_path: Path, change: dict[str, Any],
                                                          said: str) -> None:
    from stalesim.validate.checkpoint import measured_fields

    doc = {**_good(), "config": measured_fields(_cfg(tmp_path)), **change}
    if change.get("config", 0) is None:
        del doc["config"]
    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    assert said in _one_line_error(tmp_path)


def test_a_valid_crafted_round_file_is_read(tmp_path: Path) -> None:
    from stalesim.validate.checkpoint import measured_fields

    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_text(json.dumps({**_good(), "config": measured_fields(_cfg(tmp_path)), "timer": _timer(2)}))
    got = load(tmp_path, _cfg(tmp_path))
    assert got.rounds == 1 and got.runs == {"1f1b": [{"error": "x"}]} and got.timer is not None
    assert got.timer["layouts"] == 2


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,  # deeper than the parser's recursion
    '{"format": 2, "round": 1' + "0" * 5000 + "}",  # more digits than int() converts
    '{"format": 2, "round": 0, "config": {}, "x": NaN',  # torn
    "",
])
def test_hostile_json_is_one_line(tmp_path: Path, text: str) -> None:
    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_text(text)
    _one_line_error(tmp_path)


def test_config_written_with_a_text_against_a_number_is_one_line(tmp_path: Path) -> None:
    """Compared field by field with ``!=`` (never ordered), so mixed types cannot raise."""
    from stalesim.validate.checkpoint import measured_fields

    cfg = {**measured_fields(_cfg(tmp_path)), "batch_size": "16"}
    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_text(json.dumps({**_good(), "config": cfg}))
    assert "batch_size = '16', this command has 16" in _one_line_error(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_place_of_a_round_file_does_not_block(tmp_path: Path) -> None:
    path = round_path(tmp_path, 0)
    path.parent.mkdir()
    os.mkfifo(path)
    # is_file() is False for a FIFO: no round 0 is there, and nothing waits on it
    assert "no finished round" in _one_line_error(tmp_path)


def test_the_timer_state_round_trips_through_json() -> None:
    """The real stage timer's samples written and restored give the same stage times."""
    t = LayoutTimer([None, None])
    t._alone = [[{"F": [1.0, 2.0], "B": [3.0, 4.0]}], None]
    t._busy = [[{"F": [2.0, 3.0]}], None]
    t._busy_wait = [{0.001: [{"F": [5.0]}]}, {}]
    t._alone_passes = [[[{"F": 1.5, "B": 3.5}]], []]
    t._busy_passes = [[[{"F": 2.5}]], []]
    t._alone_ratios = [{"F": [0.9, 1.1]}, {}]
    t._busy_ratios = [{"F": [0.8, 1.2]}, {}]
    t.passes = 1
    state = json.loads(json.dumps(t.state()))
    assert check_timer_state(state) is None
    back = LayoutTimer([None, None])
    back.restore(state)
    assert back.passes == 1
    assert [x.to_dict() for x in back.times()] == [x.to_dict() for x in t.times()]
    contended = back.times()[0].contended
    assert contended is not None and contended.after_wait[0.001].mean_s == [{"F": 5.0}]
