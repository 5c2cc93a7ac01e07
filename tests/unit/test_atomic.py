import errno
import json
import os
import stat

import pytest

from stalesim import atomic
from stalesim.atomic import (
    AppendLog,
    atomic_open,
    check_target,
    savefig_atomic,
    torch_save_atomic,
    write_bytes_atomic,
    write_csv_atomic,
    write_json_atomic,
    write_text_atomic,
)
from stalesim.errors import StalesimError


def _names(d):
    return sorted(p.name for p in d.iterdir())


def test_writes_and_leaves_no_temporaries(tmp_path):
    write_text_atomic(tmp_path / "a" / "x.txt", "hello\n")
    write_json_atomic(tmp_path / "a" / "y.json", {"k": [1, 2]})
    write_bytes_atomic(tmp_path / "a" / "z.bin", b"\0\1")
    assert (tmp_path / "a" / "x.txt").read_text() == "hello\n"
    assert json.loads((tmp_path / "a" / "y.json").read_text()) == {"k": [1, 2]}
    assert (tmp_path / "a" / "z.bin").read_bytes() == b"\0\1"
    assert _names(tmp_path / "a") == ["x.txt", "y.json", "z.bin"]


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "r.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"bad": float("nan")})  # allow_nan=False
    assert json.loads(target.read_text()) == {"ok": 1}
    assert _names(tmp_path) == ["r.json"]


def test_interrupt_mid_write_removes_the_temporary(tmp_path):
    target = tmp_path / "r.txt"
    with pytest.raises(KeyboardInterrupt), atomic_open(target, "w") as fh:
        fh.write("half")
        raise KeyboardInterrupt
    assert _names(tmp_path) == []


def test_torch_save_round_trip(tmp_path):
    import torch

    t = torch.arange(5.0)
    torch_save_atomic({"t": t}, tmp_path / "c.pt")
    assert torch.equal(torch.load(tmp_path / "c.pt", weights_only=True)["t"], t)


def test_new_files_follow_the_umask_and_rewrites_keep_the_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640  # 0666 & ~027, not 0600
    kept = tmp_path / "kept.txt"
    kept.write_text("old")
    os.chmod(kept, 0o604)
    write_text_atomic(kept, "new")
    assert kept.read_text() == "new"
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o604


def test_csv_writer_dicts_and_lists(tmp_path):
    write_csv_atomic(tmp_path / "d.csv", [{"a": 1, "b": 2, "c": 9}, {"a": 3, "b": 4}], header=["a", "b"])
    assert (tmp_path / "d.csv").read_text().splitlines() == ["a,b", "1,2", "3,4"]
    write_csv_atomic(tmp_path / "l.csv", [[1, "x,y"]], header=["n", "s"])
    assert (tmp_path / "l.csv").read_text().splitlines() == ["n,s", '1,"x,y"']
    write_csv_atomic(tmp_path / "e.csv", [], header=["only"])
    assert (tmp_path / "e.csv").read_bytes() == b"only\r\n"


# ------------------------------------------------------------- special targets
def _special_targets(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    real = tmp_path / "real.txt"
    real.write_text("precious")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    return {"fifo": (fifo, "FIFO"), "folder": (folder, "is a directory"),
            "link": (link, "symbolic link"), "dangling": (dangling, "symbolic link")}


@pytest.mark.parametrize("kind", ["fifo", "folder", "link", "dangling"])
def test_special_targets_are_refused(tmp_path, kind):
    target, words = _special_targets(tmp_path)[kind]
    before = _names(tmp_path)
    with pytest.raises(StalesimError, match=words) as info:
        write_text_atomic(target, "x")
    assert str(target) in str(info.value) and "\n" not in str(info.value)
    assert _names(tmp_path) == before  # no temporaries
    assert (tmp_path / "real.txt").read_text() == "precious"
    assert not (tmp_path / "nowhere.txt").exists()


def test_device_files_are_refused_before_anything_is_written():
    # /dev/null is a character device: the check refuses it without opening a temp file in /dev
    with pytest.raises(StalesimError, match="character device"):
        check_target("/dev/null")


def test_a_file_in_the_parent_path_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StalesimError, match="f"):
        write_text_atomic(tmp_path / "f" / "sub" / "x.txt", "y")


# ------------------------------------------------------------- injected errors
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
@pytest.mark.parametrize("where", ["open", "fsync", "replace"])
def test_os_errors_become_one_line_and_leave_nothing(tmp_path, monkeypatch, err, where):
    target = tmp_path / "out.json"
    target.write_text('{"old": 1}\n')
    real = {"open": os.open, "fsync": os.fsync, "replace": os.replace}[where]

    def boom(*a, **kw):
        if where == "open" and not str(a[0]).endswith(".tmp"):
            return real(*a, **kw)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(atomic.os, where, boom)
    with pytest.raises(StalesimError) as info:
        write_json_atomic(target, {"new": 2})
    msg = str(info.value)
    assert msg.startswith(f"{target}: {os.strerror(err)}") and "\n" not in msg
    monkeypatch.undo()
    assert _names(tmp_path) == ["out.json"]
    assert json.loads(target.read_text()) == {"old": 1}


def test_enospc_during_a_streamed_write_is_one_line(tmp_path):
    target = tmp_path / "big.bin"

    with pytest.raises(StalesimError, match="No space left on device"), atomic_open(target, "wb") as fh:
        fh.write(b"x" * 10)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert _names(tmp_path) == []


def test_missing_parent_that_cannot_be_created(tmp_path, monkeypatch):
    from pathlib import Path

    def deny(self, *a, **kw):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(Path, "mkdir", deny)
    with pytest.raises(StalesimError, match="cannot create folder: Permission denied"):
        write_text_atomic(tmp_path / "new" / "x.txt", "y")


# ------------------------------------------------------------------ append log
def test_append_log_starts_atomically_and_appends_lines(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("stale\n")
    with AppendLog(p, ["a", "b"]) as log:
        log.write_line("c")
        assert p.read_text() == "a\nb\nc\n"  # flushed line by line
    assert _names(tmp_path) == ["m.jsonl"]


def test_append_log_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "m.jsonl")
    with pytest.raises(StalesimError, match="FIFO"):
        AppendLog(tmp_path / "m.jsonl")


# --------------------------------------------------------------------- figures
def test_savefig_atomic_formats(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    try:
        savefig_atomic(fig, tmp_path / "f.png")
        assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
        with pytest.raises(StalesimError, match="unsupported figure format 'txt'"):
            savefig_atomic(fig, tmp_path / "f.txt")
    finally:
        plt.close(fig)
    assert _names(tmp_path) == ["f.png"]
