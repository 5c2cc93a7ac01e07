"""Every command that writes refuses special files and turns OS errors into one line (exit 2),
leaving neither a partial file nor a temporary behind."""

from __future__ import annotations

import errno
import os

import pytest

from stalesim import atomic
from stalesim.cli import main
from stalesim.workloads.profile import uniform_profile


@pytest.fixture
def prof(tmp_path):
    p = tmp_path / "p.json"
    uniform_profile(6, 1e-3, 2e-3, 32).to_json(p)
    return p


def _one_line_error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("stalesim: error: "), err
    return err[0]


def _temporaries(root):
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def _targets(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "real").write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    return {"fifo": fifo, "folder": folder, "link": link}


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
@pytest.mark.parametrize("flag", ["--trace", "--plot", "--csv", "-o"])
def test_special_targets_are_refused(capsys, tmp_path, prof, kind, flag):
    target = _targets(tmp_path)[kind]
    if flag == "--csv":
        argv = ["sweep", "--profile", str(prof), "--schedules", "stale", "--stages", "2", "--csv", str(target)]
    elif flag == "-o":
        argv = ["profile", "--roofline", "h100-sxm", "--from", str(prof), "-o", str(target)]
    else:
        argv = ["simulate", "--profile", str(prof), "--schedule", "stale", "-S", "2", flag, str(target)]
    line = _one_line_error(capsys, argv)
    assert str(target) in line
    assert (tmp_path / "real").read_text() == "keep" and target.is_symlink() == (kind == "link")
    assert not _temporaries(tmp_path)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_os_errors_while_writing_a_trace_are_one_line(capsys, tmp_path, prof, monkeypatch, err):
    def fail(*a, **kw):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(atomic.os, "fsync", fail)
    out = tmp_path / "t.json"
    line = _one_line_error(capsys, ["simulate", "--profile", str(prof), "--schedule", "gpipe", "-S", "2",
                                    "-M", "2", "--trace", str(out)])
    assert line == f"stalesim: error: {out}: {os.strerror(err)}"
    assert not out.exists() and not _temporaries(tmp_path)


def test_a_missing_parent_that_cannot_be_created(capsys, tmp_path, prof):
    (tmp_path / "file").write_text("x")
    line = _one_line_error(capsys, ["sweep", "--profile", str(prof), "--schedules", "stale", "--stages", "2",
                                    "--csv", str(tmp_path / "file" / "sub" / "r.csv")])
    assert "a folder in the path is a file" in line


def test_enospc_in_the_emulators_run_folder(capsys, tmp_path, monkeypatch):
    real_replace = os.replace

    def full(src, dst, *a, **kw):
        if str(dst).endswith("summary.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(atomic.os, "replace", full)
    out = tmp_path / "run"
    line = _one_line_error(capsys, ["emulate", "--model", "lenet5", "--dataset", "synthetic", "--iterations", "2",
                                    "--batch-size", "8", "--synthetic-size", "32", "--quiet", "--out", str(out)])
    assert line == f"stalesim: error: {out / 'summary.json'}: No space left on device"
    assert not (out / "summary.json").exists() and not _temporaries(tmp_path)


def test_new_outputs_get_the_umask_mode_not_0600(tmp_path, prof):
    old = os.umask(0o022)
    try:
        assert main(["simulate", "--profile", str(prof), "--schedule", "stale", "-S", "2",
                     "--trace", str(tmp_path / "t.json")]) == 0
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "t.json").st_mode & 0o777) == 0o644


@pytest.mark.parametrize("cmd", ["emulate", "run"])
def test_out_naming_a_file_is_one_line_before_any_work(capsys, tmp_path, cmd):
    f = tmp_path / "afile"
    f.write_text("x")
    argv = [cmd, "--model", "lenet5", "--dataset", "synthetic", "--iterations", "2", "--out", str(f)]
    if cmd == "run":
        argv += ["--devices", "cpu:1"]
    line = _one_line_error(capsys, argv)
    assert "is not a folder" in line and f.read_text() == "x"
