"""Resume never executes a pickle: a planted checkpoint whose ``__reduce__`` would create a
file is refused in one line by ``emulate --resume`` and ``run --resume``, and the file is not
created. Foreign, torn and empty checkpoints are one-line errors too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]
EMU = ["emulate", "--model", "lenet5", "--dataset", "synthetic", "--schedule", "stale", "--stages", "2",
       "--iterations", "6", "--batch-size", "8", "--synthetic-size", "32", "--quiet"]


class Planted:
    """Unpickling this calls ``open(marker, "w")``: it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": 1, "config": {}, "payload": Planted(marker)}, path)


def _one_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("stalesim: error: "), (rc, err)
    return err[0]


def test_planted_pickle_does_not_run_on_emulate_resume(capsys, tmp_path):
    marker = tmp_path / "PWNED"
    _plant(tmp_path / "run" / "checkpoint.pt", marker)
    line = _one_line(capsys, EMU + ["--out", str(tmp_path / "run"), "--resume"])
    assert "not a stalesim checkpoint" in line and "checkpoint.pt" in line
    assert not marker.exists()


@pytest.mark.parametrize("content", ["empty", "torn", "tensor", "foreign"])
def test_foreign_checkpoints_are_one_line(capsys, tmp_path, content):
    ck = tmp_path / "run" / "checkpoint.pt"
    ck.parent.mkdir()
    if content == "empty":
        ck.write_bytes(b"")
    elif content == "torn":
        torch.save({"format": 1, "w": torch.zeros(1000)}, ck)
        ck.write_bytes(ck.read_bytes()[:300])
    elif content == "tensor":
        torch.save(torch.zeros(3), ck)
    else:
        torch.save({"format": 1, "config": {}, "weights": [torch.zeros(2)]}, ck)
    line = _one_line(capsys, EMU + ["--out", str(tmp_path / "run"), "--resume"])
    assert str(ck) in line


def test_real_checkpoints_hold_only_plain_data(tmp_path):
    assert main(EMU + ["--out", str(tmp_path), "--checkpoint-every", "2"]) == 0
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # would raise otherwise
    assert state["format"] == 1 and isinstance(state["runtimes"], list)


@pytest.mark.slow
def test_planted_pickle_does_not_run_on_run_resume(tmp_path):
    marker = tmp_path / "PWNED"
    out = tmp_path / "run"
    for r in range(2):
        _plant(out / "checkpoints" / "k0000005" / f"rank{r}.pt", marker)
    cmd = [sys.executable, "-m", "stalesim", "run", "--model", "lenet5", "--dataset", "synthetic",
           "--schedule", "stale", "--stages", "2", "--devices", "cpu:2", "--iterations", "12",
           "--batch-size", "8", "--synthetic-size", "32", "--checkpoint-every", "5", "--resume",
           "--out", str(out), "--timeout", "20"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("stalesim:")]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and "not a stalesim checkpoint" in lines[0] and "Traceback" not in p.stderr
    assert not marker.exists()


# ---------------------------------------------------------------- bounded reads
import pickle  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402

from stalesim.checkpoint_io import MAX_PICKLE_STACK, brief, pickle_cap, read_checkpoint  # noqa: E402
from stalesim.errors import StalesimError  # noqa: E402
from stalesim.limits import MAX_CHECKPOINT_DEPTH, MAX_CHECKPOINT_PICKLE_BYTES  # noqa: E402


def _torch_zip(path: Path, pkl: bytes) -> Path:
    """A file laid out as torch.save writes it, holding the pickle ``pkl`` and no tensors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return path


def _deep_pushes(n: int) -> bytes:
    """{"format": [[[...]]]} n lists deep, all pushed before any is closed."""
    return b"\x80\x02}X\x06\x00\x00\x00format" + b"]" * n + b"a" * (n - 1) + b"s."


def _deep_memo(n: int) -> bytes:
    """{"format": [L0, L0, L1, ...]} with L0 = [L1], L1 = [L2], ... n deep, on a stack of at most
    6: each new list is appended to its parent fetched back from the memo, and the parent then
    to the outer list (torch's unpickler has no POP), so only the loaded object shows the depth."""
    out = [b"\x80\x02}X\x06\x00\x00\x00format]]r\x00\x00\x00\x00a"]  # outer; L0 (memo 0) into it
    for i in range(1, n):
        out.append(b"j" + (i - 1).to_bytes(4, "little"))  # LONG_BINGET parent
        out.append(b"]r" + i.to_bytes(4, "little"))  # EMPTY_LIST, LONG_BINPUT i
        out.append(b"aa")  # child into parent, parent into the outer list
    out.append(b"s.")
    return b"".join(out)


def _diamonds(n: int) -> bytes:
    """{"format": [L0, ..., L_{n-1}]} with L_i = [L_{i+1}, L_{i+1}]: 2^n paths from L0, so a walk
    that does not remember what it has seen never ends."""
    out = [b"\x80\x02}X\x06\x00\x00\x00format]", b"]r" + (n - 1).to_bytes(4, "little") + b"a"]
    for i in range(n - 2, -1, -1):
        child = b"j" + (i + 1).to_bytes(4, "little") + b"a"
        out.append(b"]" + child + child + b"r" + i.to_bytes(4, "little") + b"a")
    out.append(b"s.")
    return b"".join(out)


def test_a_million_nested_lists_are_refused_in_milliseconds(tmp_path):
    p = _torch_zip(tmp_path / "deep.pt", _deep_pushes(10**6))
    t0 = time.perf_counter()
    with pytest.raises(StalesimError, match=f"more than {MAX_PICKLE_STACK:,} objects deep"):
        read_checkpoint(p, what="resume", steps=10**5)
    assert time.perf_counter() - t0 < 1.0


def test_deep_nesting_built_through_the_memo_is_refused(tmp_path):
    p = _torch_zip(tmp_path / "deep.pt", _deep_memo(MAX_CHECKPOINT_DEPTH + 50))
    with pytest.raises(StalesimError, match=f"nested more than {MAX_CHECKPOINT_DEPTH} levels"):
        read_checkpoint(p, what="resume", steps=100)
    shallow = _torch_zip(tmp_path / "ok.pt", _deep_memo(20))
    assert isinstance(read_checkpoint(shallow, what="resume", steps=100)["format"], list)


def test_shared_containers_are_walked_once(tmp_path):
    p = _torch_zip(tmp_path / "dag.pt", _diamonds(60))
    t0 = time.perf_counter()
    assert len(read_checkpoint(p, what="resume", steps=10)["format"]) == 60
    assert time.perf_counter() - t0 < 2.0


def test_a_container_that_holds_itself_is_refused(tmp_path):
    # {"format": L} with L = [L]: EMPTY_LIST, BINPUT 1, BINGET 1, APPEND
    p = _torch_zip(tmp_path / "cycle.pt", b"\x80\x02}X\x06\x00\x00\x00format]q\x01h\x01as.")
    with pytest.raises(StalesimError, match="holds itself"):
        read_checkpoint(p, what="resume", steps=10)


def test_a_large_pickle_is_refused_from_its_size_before_it_is_read(tmp_path):
    ints = pickle.dumps({"format": 1, "a": [i % 100 for i in range(3 * 10**6)]}, protocol=2)  # 6 MB
    p = _torch_zip(tmp_path / "ints.pt", ints)
    t0 = time.perf_counter()
    with pytest.raises(StalesimError, match="pickle part has 6,0"):
        read_checkpoint(p, what="resume", steps=100, tensors=10)
    assert time.perf_counter() - t0 < 0.5
    assert pickle_cap(100, 1, 10) < len(ints) < pickle_cap(2000, 1, 10)
    assert pickle_cap(None) == MAX_CHECKPOINT_PICKLE_BYTES == pickle_cap(10**9)


def test_brief_bounds_a_hostile_value():
    assert len(brief(list(range(10**6)))) < 100 and len(brief("x" * 10**6)) < 100


def test_real_checkpoints_fit_their_run_bounds(tmp_path):
    assert main(EMU + ["--out", str(tmp_path), "--checkpoint-every", "2"]) == 0
    with zipfile.ZipFile(tmp_path / "checkpoint.pt") as z:
        size = next(i.file_size for i in z.infolist() if i.filename.endswith("data.pkl"))
    assert size < pickle_cap(6, 1, 0) // 4  # far inside: the cap cannot refuse a real one
    assert read_checkpoint(tmp_path / "checkpoint.pt", what="resume", steps=6)["format"] == 1


@pytest.mark.parametrize("kind", ["deep", "ints"])
def test_hostile_checkpoints_on_emulate_resume_are_one_line(capsys, tmp_path, kind):
    pkl = _deep_pushes(10**6) if kind == "deep" else \
        pickle.dumps({"format": 1, "a": [i % 100 for i in range(2 * 10**6)]}, protocol=2)
    _torch_zip(tmp_path / "run" / "checkpoint.pt", pkl)
    line = _one_line(capsys, EMU + ["--out", str(tmp_path / "run"), "--resume"])
    assert "is not one this run wrote" in line and "checkpoint.pt" in line
