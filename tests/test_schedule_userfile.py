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
