"""``--schedule-file``: our action-list JSON or torch's CSV, through the IR's own checks."""

from __future__ import annotations

import json

import pytest

from stalesim.errors import ScheduleError
from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.schedule.torch_interop import to_torch_csv
from stalesim.schedule.userfile import file_batches, load_schedule_file


def _export(tmp_path, name="1f1b", **kw):
    sched = build_schedule(ScheduleConfig(name, **kw))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(sched.to_dict()))
    return sched, path


@pytest.mark.parametrize("name, kw", [
    ("1f1b", {"stages": 3, "batches": 4, "microbatches": 3}),
    ("stale", {"stages": 3, "batches": 5}),
    ("pipedream", {"stages": 2, "batches": 6}),
    ("zb-h1", {"stages": 2, "batches": 2, "microbatches": 4}),
    ("dp", {"stages": 2, "batches": 3, "workers": 2}),
    ("interleaved-1f1b", {"stages": 4, "batches": 2, "microbatches": 4}),
])
def test_exported_json_reads_back_as_the_same_schedule(tmp_path, name, kw):
    """What `stalesim schedule NAME --json` prints is a schedule file: the same actions (versions
    and sends derived again), placement and version table."""
    ours, path = _export(tmp_path, name, **kw)
    back = load_schedule_file(path)
    assert back.device_actions == ours.device_actions
    assert back.placement == ours.placement and back.policy == ours.policy
    assert back.versions.rows() == ours.versions.rows()
    assert file_batches(path) == ours.batches


def test_torch_csv_repeats_one_step(tmp_path):
    ours = build_schedule(ScheduleConfig("gpipe", stages=2, batches=3, microbatches=2))
    path = to_torch_csv(ours, tmp_path / "g.csv")
    back = load_schedule_file(path, 3)
    assert file_batches(path) is None
    assert back.name == "torch-csv:g.csv" and back.batches == 3 and back.stages == 2
    assert [[(a.kind, a.stage, a.batch, a.micro) for a in acts] for acts in back.device_actions] == \
        [[(a.kind, a.stage, a.batch, a.micro) for a in acts] for acts in ours.device_actions]


def test_edited_order_is_checked_by_the_ir(tmp_path):
    """A user's edit that breaks the order (a backward before its forward) is refused by the
    IR's validation, naming the file."""
    _, path = _export(tmp_path, "1f1b", stages=2, batches=1, microbatches=2)
    doc = json.loads(path.read_text())
    acts = doc["actions"]["1"]
    f = next(i for i, a in enumerate(acts) if a.startswith("1F0.0"))
    b = next(i for i, a in enumerate(acts) if a.startswith("1B0.0"))
    acts[f], acts[b] = acts[b], acts[f]
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleError, match=r"^--schedule-file: 1f1b.json: "):
        load_schedule_file(path)


def test_placement_may_be_left_out(tmp_path):
    ours, path = _export(tmp_path, "stale", stages=2, batches=3)
    doc = json.loads(path.read_text())
    del doc["placement"], doc["policy"]
    path.write_text(json.dumps(doc))
    assert load_schedule_file(path).placement == ours.placement


@pytest.mark.parametrize("content, needle", [
    ("not json", "is not JSON"),
    ('{"actions": []}', 'expected a JSON object with "actions"'),
    ('{"actions": {"0": ["0F0", "0Q0"]}}', "device 0: cannot parse action '0Q0'"),
    ('{"actions": {"1": ["0F0"]}}', "devices must be numbered 0..0"),
    ('{"actions": {"0": ["0F0", "0LOSS0", "0B0", "0U0"]}, "policy": "newest"}', "policy must be one of"),
    ('{"actions": {"0": ["0F0.0", "0LOSS0", "0B0", "0U0"]}}', "either every F/B/LOSS names a micro-batch"),
    ('{"actions": {"0": ["0F0", "0LOSS0", "0B0", "0U0"]}, "placement": [[1]]}', "placement must be 1 list"),
    ('{"actions": {"0": ["0F0", "1F0"], "1": ["1LOSS0"]}}', "stage 1 of worker 0 has actions on devices 0 and 1"),
])
def test_malformed_json_is_one_line(tmp_path, content, needle):
    path = tmp_path / "mine.json"
    path.write_text(content)
    with pytest.raises(ScheduleError) as exc:
        load_schedule_file(path)
    assert str(exc.value).startswith("--schedule-file: ") and needle in str(exc.value), str(exc.value)


def test_length_and_format_errors(tmp_path):
    _, path = _export(tmp_path, "stale", stages=2, batches=3)
    with pytest.raises(ScheduleError, match="holds 3 batch"):
        load_schedule_file(path, 5)
    other = tmp_path / "order.txt"
    other.write_text("0F0")
    with pytest.raises(ScheduleError, match=r"expected a \.json file .* or a \.csv file"):
        load_schedule_file(other)
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0X1\n")
    with pytest.raises(ScheduleError, match=r"^--schedule-file: row 1"):
        load_schedule_file(bad)


def _doc(tmp_path, **change):
    _, path = _export(tmp_path, "1f1b", stages=2, batches=2)
    doc = json.loads(path.read_text())
    doc.update(change)
    return doc, path


def _refused(path, text=None):
    if text is not None:
        path.write_text(text)
    with pytest.raises(ScheduleError) as exc:
        load_schedule_file(path)
    msg = str(exc.value)
    assert msg.startswith("--schedule-file: ") and "\n" not in msg and len(msg) < 400, msg
    return msg


@pytest.mark.parametrize("edit, needle", [
    (lambda a: a["0"].__setitem__(0, "0F0.99999999"), "micro-batch indices reach 99,999,999"),
    (lambda a: a["0"].__setitem__(0, "0F999999999999.0"), "batch indices reach 999,999,999,999"),
    (lambda a: a["1"].__setitem__(1, "9999999F0.0"), "stage indices reach 9,999,999"),
    (lambda a: a["1"].__setitem__(1, "w99999:1F0.0"), "worker indices reach 99,999"),
    (lambda a: a["0"].__setitem__(0, "0F" + "9" * 5000 + ".0"), "is not an action text (at most 64 ASCII"),
    (lambda a: a["0"].__setitem__(0, "0F\u0661.0"), "is not an action text"),  # an Arabic-Indic digit
    (lambda a: a.__setitem__("00", a.pop("0")), "keys must be device numbers 0, 1, ..., got '00'"),
    (lambda a: a.__setitem__("+1", a.pop("1")), "got '+1'"),
    (lambda a: a.__setitem__("1_0", a.pop("1")), "got '1_0'"),
])
def test_indices_and_texts_are_bounded_before_the_schedule_is_built(tmp_path, edit, needle):
    """Each of these made the IR size tables for the claimed extent (minutes, gigabytes) or
    failed inside Python's int(): now one line, at once."""
    import time

    doc, path = _doc(tmp_path)
    edit(doc["actions"])
    path.write_text(json.dumps(doc))
    t0 = time.perf_counter()
    assert needle in _refused(path)
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize("text, needle", [
    ('{"actions": {"0": ["0F0"]}, "stages_per_device": 1' + "0" * 5000 + "}", "a number of 5,001 characters"),
    ('{"actions": {"0": ["0F0"]}, "x": 1.' + "5" * 400 + "}", "is longer than any index or count"),
    ('{"actions": {"0": ["0F0"]}, "x": NaN}', "NaN is not a number a schedule file holds"),
    ('{"actions": {"0": ["0F0"]}, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"actions": {"0": ["0F0", "0LOSS0", "0B0", "0U0"]}, "policy": ["latest"]}', "policy must be one of"),
    ('{"actions": {"0": ["0F0", "0LOSS0", "0B0", "0U0"]}, "stages_per_device": 9}',
     r"stages_per_device must be an integer in [1, 1]"),
])
def test_hostile_json_is_one_line(tmp_path, text, needle):
    assert needle in _refused(tmp_path / "mine.json", text)


def test_a_file_longer_than_an_export_is_refused_before_its_order_is_built(tmp_path, monkeypatch):
    """The bound is what `stalesim schedule --json` exports (made small here to keep the
    test fast): one text past it is refused, from the count, before any text is parsed."""
    import stalesim.limits as sc

    sched, path = _export(tmp_path, "gpipe", stages=2, batches=5)
    from stalesim.schedule.actions import COMM_KINDS

    n = sum(a.kind not in COMM_KINDS for acts in sched.device_actions for a in acts)
    assert n == 35  # 5 batches x (F, B, U per stage + LOSS)
    monkeypatch.setattr(sc, "MAX_SHOWN", n)
    assert load_schedule_file(path).batches == 5
    monkeypatch.setattr(sc, "MAX_SHOWN", n - 1)
    assert f"{n:,} compute actions, more than a schedule file holds ({n - 1:,}" in _refused(path)
    monkeypatch.setattr(sc, "MAX_SHOWN", 2)
    assert "more than 6 action texts" in _refused(path)


def test_a_deadlocking_order_is_refused_before_simulating(tmp_path):
    """Device 1 takes batch 1 first while device 0 sends batch 0 first and waits for its
    backward: the IR's dependency check finds the cycle."""
    doc, path = _doc(tmp_path)
    doc["actions"] = {"0": ["0F0.0", "0B0.0", "0U0", "0F1.0", "0B1.0", "0U1"],
                      "1": ["1F1.0", "1LOSS1.0", "1B1.0", "1U1", "1F0.0", "1LOSS0.0", "1B0.0", "1U0"]}
    path.write_text(json.dumps(doc))
    assert "deadlocks" in _refused(path)
    import stalesim

    prof = __import__("stalesim.workloads.profile", fromlist=["x"]).uniform_profile(
        2, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=100)
    with pytest.raises(ScheduleError, match="deadlocks"):
        stalesim.simulate(prof, path)


@pytest.mark.parametrize("label", ["0F1\u00e9", "\u0661F0", "0F\u0660", "\ufeff0F0", "0F\uff11"])
def test_a_csv_with_non_ascii_labels_is_refused_at_once(tmp_path, label):
    import time

    path = tmp_path / "order.csv"
    path.write_text(f"0F0,{label}\n1F0,1B0\n")
    t0 = time.perf_counter()
    msg = _refused(path)
    assert "row 1" in msg and "is not a character of a torch schedule CSV" in msg
    assert time.perf_counter() - t0 < 2.0  # before torch is imported to read it
