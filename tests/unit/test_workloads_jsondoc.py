"""Reading a user's JSON document: every way it can be unreadable is one line."""

from __future__ import annotations

import os

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.jsondoc import read_json


def test_reads_json(tmp_path) -> None:
    p = tmp_path / "a.json"
    p.write_text('{"a": [1, 2]}')
    assert read_json(p, "profile") == {"a": [1, 2]}


@pytest.mark.parametrize("content,needle", [
    (b"", "not valid JSON"),
    (b'{"a": [1, 2', "not valid JSON"),
    (b"\xff\xfe\x00", "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_bad_documents(tmp_path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(StalesimError, match=needle) as exc:
        read_json(p, "hardware")
    assert str(exc.value).startswith(f"hardware {str(p)!r}: ") and "\n" not in str(exc.value)


def test_not_a_regular_file(tmp_path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it would block forever
    with pytest.raises(StalesimError, match="not a regular file"):
        read_json(fifo, "profile")
    with pytest.raises(StalesimError, match="a folder"):
        read_json(tmp_path, "profile")
    with pytest.raises(StalesimError, match="cannot read"):
        read_json(tmp_path / "missing.json", "profile")
    with pytest.raises(StalesimError, match="not a regular file"):
        read_json(os.devnull, "profile")


def test_too_large(tmp_path, monkeypatch) -> None:
    import stalesim.workloads.jsondoc as jd

    monkeypatch.setattr(jd, "MAX_DOCUMENT_BYTES", 10)
    p = tmp_path / "big.json"
    p.write_text("[" + "1," * 20 + "1]")
    with pytest.raises(StalesimError, match="larger than this tool reads"):
        read_json(p, "profile")
