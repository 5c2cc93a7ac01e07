"""Reading a JSON document the user names (a profile, a hardware description).

One reader, so every such file fails the same way, in one line naming the file:
not a regular file (a folder, a device, a FIFO that would block forever), too
large, not UTF-8, not JSON, or nested too deeply for the parser (Python's
``json`` raises ``RecursionError`` at about a thousand levels). What the
document holds is validated field by field by its own loader.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from stalesim.errors import StalesimError

__all__ = ["MAX_DOCUMENT_BYTES", "read_json"]

# far above any real profile (131,072 layers of ~400 bytes) or hardware file
MAX_DOCUMENT_BYTES = 256 << 20


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """The parsed JSON at ``path``; StalesimError ``"<what> '<path>': <reason>"`` otherwise."""
    name = f"{what} {os.fspath(path)!r}"
    try:
        st = os.stat(path)
    except OSError as exc:
        raise StalesimError(f"{name}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise StalesimError(f"{name}: cannot read ({kind})")
    if st.st_size > MAX_DOCUMENT_BYTES:
        raise StalesimError(f"{name}: {st.st_size:,} bytes is larger than this tool reads "
                            f"({MAX_DOCUMENT_BYTES:,})")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise StalesimError(f"{name}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StalesimError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StalesimError(f"{name}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise StalesimError(f"{name}: nested too deeply to be a {what}") from None
