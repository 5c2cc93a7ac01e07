"""The one reader of files the user names: a regular file, bounded, UTF-8, or one line."""

from __future__ import annotations

import os

import pytest

from stalesim.errors import StalesimError
from stalesim.inputs import read_text


def test_reads_text(tmp_path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("0F0,0B0\n")
    assert read_text(p, "--from-torch-csv") == "0F0,0B0\n"


def test_special_files_are_refused_without_reading(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would block until a writer comes
    for path, needle in [(fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                         (tmp_path, "a folder"), (tmp_path / "none", "No such file")]:
        with pytest.raises(StalesimError, match=needle) as info:
            read_text(path, "--from-torch-csv")
        assert str(info.value).startswith(f"--from-torch-csv {str(path)!r}: ")


def test_size_and_encoding(tmp_path) -> None:
    p = tmp_path / "big.csv"
    p.write_bytes(b"x" * 11)
    with pytest.raises(StalesimError, match="11 bytes is larger than this tool reads \\(10\\)"):
        read_text(p, "csv", 10)
    p.write_bytes(b"ok\xd0\xff")
    with pytest.raises(StalesimError, match="not UTF-8 text \\(byte 2\\)"):
        read_text(p, "csv")
