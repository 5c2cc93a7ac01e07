import json

import pytest

from stalesim.atomic import torch_save_atomic, write_json_atomic, write_text_atomic


def test_writes_and_leaves_no_temporaries(tmp_path):
    write_text_atomic(tmp_path / "a" / "x.txt", "hello\n")
    write_json_atomic(tmp_path / "a" / "y.json", {"k": [1, 2]})
    assert (tmp_path / "a" / "x.txt").read_text() == "hello\n"
    assert json.loads((tmp_path / "a" / "y.json").read_text()) == {"k": [1, 2]}
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.txt", "y.json"]


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "r.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"bad": float("nan")})  # allow_nan=False
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_torch_save_round_trip(tmp_path):
    import torch

    t = torch.arange(5.0)
    torch_save_atomic({"t": t}, tmp_path / "c.pt")
    assert torch.equal(torch.load(tmp_path / "c.pt")["t"], t)
