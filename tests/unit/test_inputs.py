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


def test_gzip_is_bounded_by_what_it_unpacks_to(tmp_path) -> None:
    import gzip

    from stalesim.inputs import read_bytes

    p = tmp_path / "bomb.txt.gz"
    p.write_bytes(gzip.compress(b"a" * (4 << 20), compresslevel=9))  # ~4 KiB unpacking to 4 MiB
    assert p.stat().st_size < 64 << 10
    with pytest.raises(StalesimError, match="larger unpacked than this tool reads \\(1,048,576 bytes\\)"):
        read_bytes(p, "dataset", 1 << 20, gunzip=True)
    assert len(read_bytes(p, "dataset", 4 << 20, gunzip=True)) == 4 << 20
    with pytest.raises(StalesimError, match="not a valid gzip file"):
        read_bytes(_write(tmp_path / "bad.gz", b"not gzip"), "dataset", 1 << 20, gunzip=True)
    with pytest.raises(StalesimError, match="larger than this tool reads"):
        read_bytes(_write(tmp_path / "plain.txt", b"x" * 100), "dataset", 10)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_corpus_gzip_bomb_is_one_line(tmp_path, monkeypatch) -> None:
    import gzip

    import stalesim.runtime.text as text
    from stalesim.runtime.config import TrainConfig

    d = tmp_path / "shakespeare"
    d.mkdir()
    (d / "shakespeare_complete.txt.gz").write_bytes(gzip.compress(b"to be " * (1 << 20), compresslevel=9))
    monkeypatch.setattr(text, "MAX_CORPUS_BYTES", 1 << 20)  # 6 MiB unpacked: over the bound
    cfg = TrainConfig(model="gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8", dataset="shakespeare",
                      data_dir=str(tmp_path), iterations=1, batch_size=2)
    with pytest.raises(StalesimError, match="shakespeare_complete.txt.gz'?: larger unpacked than this tool reads"):
        text.load_shakespeare(cfg)


def test_no_home_folder_falls_back_to_a_private_cache(tmp_path, monkeypatch) -> None:
    from pathlib import Path

    from stalesim.runtime import datapaths

    monkeypatch.delenv("STALESIM_CACHE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    for home in (str(tmp_path / "nonexistent"), None):
        if home is None:
            monkeypatch.delenv("HOME", raising=False)
            monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
        else:
            monkeypatch.setenv("HOME", home)
        d = datapaths.cache_dir()
        assert d == tmp_path / f"stalesim-cache-{os.getuid()}" and d.is_dir()
        assert d.stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "nonexistent").exists()  # a missing home is not created
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "c"))
    assert datapaths.cache_dir() == tmp_path / "c"
