"""Reading a JSON document the user names (a profile, a hardware description).

The file is read by :func:`stalesim.inputs.read_text` (a regular file, bounded,
UTF-8), so every such file fails the same way, in one line naming the file; then
not JSON, or nested too deeply for the parser (Python's ``json`` raises
``RecursionError`` at about a thousand levels), is one line too. What the
document holds is validated field by field by its own loader.
"""

from __future__ import annotations

import json
import os
from typing import Any

from stalesim.errors import StalesimError
from stalesim.inputs import MAX_DOCUMENT_BYTES, read_text

__all__ = ["MAX_DOCUMENT_BYTES", "read_json", "read_text"]


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """The parsed JSON at ``path``; StalesimError ``"<what> '<path>': <reason>"`` otherwise."""
    name = f"{what} {os.fspath(path)!r}"
    text = read_text(path, what, MAX_DOCUMENT_BYTES)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StalesimError(f"{name}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise StalesimError(f"{name}: nested too deeply to be a {what}") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits (Python's conversion limit)
        raise StalesimError(f"{name}: not a {what} ({str(exc).splitlines()[0]})") from None
