"""stalesim.validate.tbscalars: one event file per schedule and validation, each round
readable as soon as it is written, a resumed validation's curves exactly its rounds."""

from __future__ import annotations

import pytest

from stalesim.validate.tbscalars import MEASURED, PREDICTED, ValidationScalars

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _scalars(folder):
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _files(folder):
    return sorted(p.name for p in folder.glob("events.out.tfevents.*"))


def test_each_round_is_read_back_while_the_writer_is_open(tmp_path):
    s = ValidationScalars(tmp_path)
    try:
        s.start({"gpipe": [], "stale": []})
        for k in range(12):  # many rounds in one second: one file, so no order between files
            s.round(k, {"gpipe": {"iteration_time_s": 0.5 + k}, "stale": {"error": "rank 1 died"}})
            assert _scalars(tmp_path / "gpipe")[MEASURED][-1] == (k, 0.5 + k)  # flushed
        assert [len(_files(tmp_path / n)) for n in ("gpipe", "stale")] == [1, 1]
        assert MEASURED not in _scalars(tmp_path / "stale")  # a failed run: no point
    finally:
        s.close()
    assert _scalars(tmp_path / "gpipe")[MEASURED] == [(k, 0.5 + k) for k in range(12)]


def test_final_goes_into_the_validations_file(tmp_path):
    s = ValidationScalars(tmp_path)
    s.round(0, {"gpipe": {"iteration_time_s": 0.25}})
    s.final([{"schedule": "gpipe", "predicted_iteration_time_s": 0.125, "time_error": -0.5,
              "memory_error": float("nan"), "speedup_error": True}], rounds=3)
    s.close()
    got = _scalars(tmp_path / "gpipe")
    assert len(_files(tmp_path / "gpipe")) == 1
    assert got[PREDICTED] == [(0, 0.125), (1, 0.125), (2, 0.125)]
    assert got["final/time_error"] == [(2, -0.5)]
    assert "final/memory_error" not in got and "final/speedup_error" not in got  # no number: no scalar


def test_a_resumed_validation_draws_its_restored_rounds_again_and_hides_the_killed_ones(tmp_path):
    """The killed validation wrote rounds 0 and 1 (round 1 never reached its checkpoint); the
    resumed one, in the same second, read back round 0 only and reruns round 1 with another
    time: the curve is its rounds, each once."""
    killed = ValidationScalars(tmp_path)
    killed.start({"gpipe": []})
    killed.round(0, {"gpipe": {"iteration_time_s": 1.0}})
    killed.round(1, {"gpipe": {"iteration_time_s": 2.0}})
    killed.close()
    before = _files(tmp_path / "gpipe")
    resumed = ValidationScalars(tmp_path)
    resumed.start({"gpipe": [{"iteration_time_s": 1.0}]})
    resumed.round(1, {"gpipe": {"iteration_time_s": 3.0}})
    resumed.round(2, {"gpipe": {"iteration_time_s": 4.0}})
    resumed.close()
    after = _files(tmp_path / "gpipe")
    assert after[:len(before)] == before and len(after) == len(before) + 1  # the new file sorts last
    assert _scalars(tmp_path / "gpipe")[MEASURED] == [(0, 1.0), (1, 3.0), (2, 4.0)]
