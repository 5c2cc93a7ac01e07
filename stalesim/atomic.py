"""The one file writer: atomic, refuses special files, and fails in one line.

Every result, checkpoint, figure, trace, CSV and cache file goes through here.
What a write does:

1. **Checks the target first.** A path that exists and is not a regular file is
   refused: a directory, a device (``/dev/null``, ``/dev/full``), a FIFO, a
   socket, and a **symbolic link** (even one pointing at a regular file). An
   atomic rename would replace the link itself, not write through it, and a
   link planted in a run folder could aim a write run by another user (or root)
   at any file; so we refuse, as ``O_NOFOLLOW`` does, and say so. Symlinks in the
   *folders* of the path are followed as usual (``out -> /scratch/out`` works).
2. **Writes a temporary file in the same folder** (``.<name>.<random>.tmp``),
   created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode ``0o666`` filtered by
   the umask, as ``open(path, "w")`` would make it. If the target already
   exists, its permission bits are copied (and, when we may, its owner), so
   rewriting a file never changes who can read it.
3. **fsyncs and renames** it over the target (``os.replace``: atomic on POSIX),
   then fsyncs the folder so the rename survives a crash.
4. **Cleans up on every failure**, ``KeyboardInterrupt`` included: the
   temporary file is removed and the old target (if any) is untouched.

Any ``OSError`` (read-only file system, full disk, permission denied, a
missing parent folder that cannot be created, a path component that is a
file) becomes :class:`~stalesim.errors.StalesimError` ``"<path>: <reason>"``,
which the CLI prints as ``stalesim: error: ...`` with exit status 2.

Append-mode logs (``metrics.jsonl`` that a user tails while a run goes on)
cannot be atomic as a whole. :class:`AppendLog` creates the file atomically
with its initial contents, then appends whole lines, each flushed with one
``write`` call: a reader sees complete lines, plus at most one torn last line
if the process is killed mid-write. The run's ``summary.json`` is written
(atomically) only at the end, so a folder with a summary has a complete log.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from stalesim.errors import StalesimError

PathLike = str | os.PathLike[str]

_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISCHR, "is a character device"),
    (stat.S_ISBLK, "is a block device"),
    (stat.S_ISFIFO, "is a FIFO (named pipe)"),
    (stat.S_ISSOCK, "is a socket"),
    (stat.S_ISLNK, "is a symbolic link"),
)


def os_reason(exc: OSError) -> str:
    """``OSError`` -> a short reason (``No space left on device``)."""
    return exc.strerror or (errno.errorcode.get(exc.errno or 0) if exc.errno else None) or str(exc)


def _fail(path: Path, exc: OSError, doing: str = "") -> StalesimError:
    where = f" ({doing})" if doing else ""
    return StalesimError(f"{path}: {os_reason(exc)}{where}")


def check_target(path: PathLike) -> Path:
    """Raise StalesimError unless ``path`` is absent or a regular file (not a link).

    Cheap; callers that do expensive work before writing call it first, so a bad
    output path fails before the work, not after.
    """
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except NotADirectoryError:
        raise StalesimError(f"{p}: a folder in the path is a file") from None
    except OSError as exc:
        raise _fail(p, exc) from None
    if stat.S_ISREG(st.st_mode):
        return p
    for test, what in _KINDS:
        if test(st.st_mode):
            hint = " (refusing to replace it; remove the link or name the file it points to)" \
                if what.endswith("link") else " (refusing to replace it; name a regular file)"
            raise StalesimError(f"{p}: {what}{hint}")
    raise StalesimError(f"{p}: is not a regular file (refusing to replace it)")


def ensure_dir(path: PathLike) -> Path:
    """``mkdir -p`` with one-line errors (a file in the way, read-only, no permission)."""
    d = Path(path)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StalesimError(f"{d}: exists and is not a folder") from None
    except NotADirectoryError:
        raise StalesimError(f"{d}: a folder in the path is a file") from None
    except OSError as exc:
        raise StalesimError(f"{d}: cannot create folder: {os_reason(exc)}") from None
    if not d.is_dir():
        raise StalesimError(f"{d}: exists and is not a folder")
    return d


def check_writable_dir(path: PathLike, subdirs: Sequence[str] = ()) -> Path:
    """Create ``path`` if needed and prove a file can be made in it (then removed).

    For commands that would otherwise learn only after minutes of work that their
    output folder is read-only, full, or a file. ``subdirs`` are the sub-folders the
    command will write into: each must be absent or a folder we can write in."""
    d = ensure_dir(path)
    for name in subdirs:
        sub = d / name
        try:
            st = os.stat(sub)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _fail(sub, exc) from None
        if not stat.S_ISDIR(st.st_mode):
            raise StalesimError(f"{sub}: exists and is not a folder (this command writes a folder there)")
        check_writable_dir(sub)
    probe = d / f".stalesim-write-test.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        os.close(os.open(probe, flags, 0o600))
    except OSError as exc:
        raise StalesimError(f"{d}: cannot write in this folder: {os_reason(exc)}") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return d


def check_output_file(path: PathLike) -> Path:
    """Up-front check of an output file: a regular file or absent, in a writable folder."""
    p = check_target(path)
    check_writable_dir(p.parent)
    return p


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a folder; the data itself is synced
    finally:
        os.close(fd)


class _Pending:
    """A temporary file that becomes ``target`` on :meth:`commit` (or vanishes on :meth:`abort`)."""

    def __init__(self, target: Path, binary: bool, encoding: str | None, newline: str | None) -> None:
        self.target = check_target(target)
        ensure_dir(self.target.parent)
        self.tmp = self.target.parent / f".{self.target.name}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.tmp, flags, 0o666)  # the umask applies, as for open(path, "w")
        except OSError as exc:
            raise _fail(self.target, exc) from None
        try:
            self.fh: IO[Any] = os.fdopen(fd, "wb") if binary else \
                os.fdopen(fd, "w", encoding=encoding or "utf-8", newline=newline)
        except BaseException:
            os.close(fd)
            self._unlink()
            raise

    def _unlink(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)

    def commit(self) -> Path:
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self._copy_mode()
            self.fh.close()
            check_target(self.target)  # still not a special file (it may have appeared since)
            os.replace(self.tmp, self.target)
        except OSError as exc:
            self.abort()
            raise _fail(self.target, exc) from None
        except BaseException:
            self.abort()
            raise
        _fsync_dir(self.target.parent)
        return self.target

    def _copy_mode(self) -> None:
        try:
            st = os.lstat(self.target)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        fd = self.fh.fileno()
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        if hasattr(os, "fchown"):
            with contextlib.suppress(OSError):  # only root (or the owner, for the group) may
                os.fchown(fd, st.st_uid, st.st_gid)
            # fchown can clear setuid/setgid bits: put the mode back
            os.fchmod(fd, stat.S_IMODE(st.st_mode))

    def abort(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.fh.close()
        self._unlink()


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """``with atomic_open(p, "w") as fh: ...``: the file appears whole when the block ends
    without an exception, and not at all (old contents kept) otherwise.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes). OSErrors raised inside the block by
    writes to ``fh`` (a full disk) become one-line :class:`StalesimError` naming ``path``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    pending = _Pending(Path(path), mode == "wb", encoding, newline)
    try:
        yield pending.fh
    except OSError as exc:
        pending.abort()
        raise _fail(pending.target, exc) from None
    except BaseException:
        pending.abort()
        raise
    pending.commit()


def _write_with(path: PathLike, mode: str, write: Callable[[IO[Any]], Any], **kw: Any) -> Path:
    with atomic_open(path, mode, **kw) as fh:
        write(fh)
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    return _write_with(path, "w", lambda fh: fh.write(text))


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    return _write_with(path, "wb", lambda fh: fh.write(data))


def write_json_atomic(path: PathLike, obj: Any, *, indent: int | None = 2, compact: bool = False) -> Path:
    """Strict JSON (NaN/inf refused with ValueError: map them to ``null`` before)."""
    sep = (",", ":") if compact else None

    def dump(fh: IO[str]) -> None:
        json.dump(obj, fh, indent=None if compact else indent, separators=sep, allow_nan=False)
        fh.write("\n")

    return _write_with(path, "w", dump)


def write_lines_atomic(path: PathLike, lines: Iterable[str]) -> Path:
    """One line per item (``\\n`` appended): JSONL logs written in one go."""
    def dump(fh: IO[str]) -> None:
        for line in lines:
            fh.write(line)
            fh.write("\n")

    return _write_with(path, "w", dump)


def csv_text(rows: Iterable[dict[str, Any]], fields: Sequence[str]) -> str:
    """The CSV text of dict rows in column order ``fields`` (``\\n`` line ends): what the stored
    prediction tables hold, so a fresh prediction compares equal to the file as text."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_csv_atomic(path: PathLike, rows: Iterable[Sequence[Any] | dict[str, Any]],
                     header: Sequence[str] | None = None) -> Path:
    """CSV of lists (with an optional header) or of dicts (``header`` = column order,
    default: the first row's keys); ``newline=""`` as the csv module requires."""
    def dump(fh: IO[str]) -> None:
        rows_it = iter(rows)
        first = next(rows_it, None)
        if isinstance(first, dict):
            cols = list(header) if header is not None else list(first)
            w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerow(first)
            w.writerows(rows_it)  # type: ignore[arg-type]
            return
        w2 = csv.writer(fh)
        if header is not None:
            w2.writerow(header)
        if first is not None:
            w2.writerow(first)
            w2.writerows(rows_it)

    return _write_with(path, "w", dump, newline="")


class _WriteRecorder:
    """A binary file for ``torch.save`` that remembers the first ``OSError`` of a write.

    torch's zip writer (``caffe2/serialize/inline_container.cc``) calls ``write`` from C++
    and turns a failed one (a full disk, ``RLIMIT_FSIZE``: ``EFBIG``) into a
    ``RuntimeError`` (``unexpected pos``), losing the reason; this keeps it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._fh.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        try:
            self._fh.flush()
        except OSError as exc:
            self.error = self.error or exc
            raise


# what torch's zip writer says when a write failed under it
_TORCH_WRITE_FAILED = ("unexpected pos", "PytorchStreamWriter", "inline_container", "file write failed")


def torch_save_atomic(obj: Any, path: PathLike) -> Path:
    """``torch.save`` that leaves either the old checkpoint or the new one, never a torn file;
    a write that fails under torch (full disk, file-size limit) is a one-line error naming
    ``path`` and the reason, as for every other file."""
    import torch

    def dump(fh: IO[bytes]) -> None:
        rec = _WriteRecorder(fh)
        try:
            torch.save(obj, rec)  # type: ignore[arg-type]  # a file-like object: write and flush
        except RuntimeError as exc:
            if rec.error is not None:
                raise rec.error from None  # -> "<path>: File too large" (atomic_open)
            text = str(exc)
            if any(k in text for k in _TORCH_WRITE_FAILED):
                raise StalesimError(f"{Path(path)}: cannot write checkpoint "
                                    f"({text.strip().splitlines()[0][:160]})") from None
            raise
        if rec.error is not None:  # torch carried on after a failed write: the file is torn
            raise rec.error

    return _write_with(path, "wb", dump)


def savefig_atomic(fig: Any, path: PathLike, **kw: Any) -> Path:
    """``fig.savefig(path, **kw)``, atomically; the format comes from the suffix (or
    ``format=``) and an unsupported one is a one-line error before anything is drawn."""
    p = Path(path)
    fmt = kw.pop("format", None) or p.suffix.lstrip(".").lower()
    supported = fig.canvas.get_supported_filetypes()
    if fmt not in supported:
        raise StalesimError(f"{p}: unsupported figure format {fmt!r} "
                            f"(use one of: {', '.join(sorted(supported))})")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **kw)  # render first: a drawing error leaves no file at all
    return write_bytes_atomic(p, buf.getvalue())


class AppendLog:
    """A line log a user may tail while a run goes on (``metrics.jsonl``).

    Created atomically with ``initial`` lines (e.g. the lines kept from a checkpoint),
    then each :meth:`write_line` appends one whole line with a single ``write`` and a
    flush. The path is re-checked when opened (``O_NOFOLLOW``: a link planted between
    the create and the open is refused). OSErrors become one-line StalesimErrors.
    """

    def __init__(self, path: PathLike, initial: Iterable[str] = ()) -> None:
        self.path = write_lines_atomic(path, initial)
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError as exc:
            raise _fail(self.path, exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StalesimError(f"{self.path}: is not a regular file (refusing to append to it)")
        self._fh: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8")

    def write_line(self, line: str) -> None:
        if self._fh is None:
            raise ValueError("AppendLog: write after close")
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
        except OSError as exc:
            raise _fail(self.path, exc) from None

    def close(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError as exc:
                raise _fail(self.path, exc) from None

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
