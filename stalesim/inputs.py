"""Reading a file the user names (a profile, a hardware description, a torch CSV, a corpus).

One reader, so every such file fails the same way, in one line naming the file:
not a regular file (a folder, a device such as ``/dev/zero`` that never ends, a
FIFO that would block forever), too large, or not UTF-8. A gzip file is bounded
by what it *unpacks* to (:func:`read_bytes`): 16 MiB of gzip can hold 16 GiB of
text, which must end in a one-line error, not a ``MemoryError``. What the text holds is
parsed and validated by its own loader (:mod:`stalesim.workloads.jsondoc` for
JSON, :mod:`stalesim.schedule.torch_interop` for torch's CSV).
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib

from stalesim.errors import StalesimError

__all__ = ["MAX_DOCUMENT_BYTES", "read_bytes", "read_text"]

# far above any real profile (131,072 layers of ~400 bytes) or hardware file
MAX_DOCUMENT_BYTES = 256 << 20


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of the regular file at ``path`` (at most ``max_bytes``);
    StalesimError ``"<what> '<path>': <reason>"`` otherwise (a FIFO is refused before
    it is opened, so a read never blocks; ``/dev/zero`` is not read forever)."""
    name = f"{what} {os.fspath(path)!r}"
    raw = read_bytes(path, what, MAX_DOCUMENT_BYTES if max_bytes is None else max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StalesimError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def read_bytes(path: str | os.PathLike[str], what: str, max_bytes: int, *, gunzip: bool = False) -> bytes:
    """The bytes of the regular file at ``path``, unpacked first when ``gunzip``; at most
    ``max_bytes`` of them (after unpacking: the read stops one byte past the bound, so a
    gzip bomb costs ``max_bytes`` of memory, not what it would unpack to).
    StalesimError ``"<what> '<path>': <reason>"`` otherwise."""
    name = f"{what} {os.fspath(path)!r}"
    try:
        st = os.stat(path)
    except OSError as exc:
        raise StalesimError(f"{name}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise StalesimError(f"{name}: cannot read ({kind})")
    if not gunzip and st.st_size > max_bytes:
        raise StalesimError(f"{name}: {st.st_size:,} bytes is larger than this tool reads ({max_bytes:,})")
    try:
        with (gzip.open(path, "rb") if gunzip else open(path, "rb")) as fh:
            raw = fh.read(max_bytes + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise StalesimError(f"{name}: not a valid gzip file ({type(exc).__name__})") from None
    except OSError as exc:
        raise StalesimError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        unpacked = " unpacked" if gunzip else ""
        raise StalesimError(f"{name}: larger{unpacked} than this tool reads ({max_bytes:,} bytes)")
    return raw
