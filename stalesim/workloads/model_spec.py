"""A model-spec file (JSON or TOML) as a :class:`~stalesim.workloads.transformer.TransformerSpec`.

Any decoder-only shape, not only the presets, from the command line
(``--model-spec my.json``). The file is one flat table whose keys are the
spec's own field names (:data:`SPEC_FIELDS`; the table is documented in
docs/llm-models.md), so a field is defined once, in the dataclass::

    {"name": "my-22b", "layers": 48, "hidden": 6144, "heads": 48, "kv_heads": 8,
     "ffn": 16384, "ffn_type": "swiglu", "vocab": 65536, "seq": 4096,
     "norm": "rmsnorm", "bias": false, "tied_embeddings": false}

``base`` (optional) names a preset whose fields the file then overrides. The
file is untrusted input, read with its bounds checked before anything is
built from it: at most :data:`MAX_SPEC_BYTES` bytes, one level (no nested
tables or lists), integers of at most :data:`MAX_DIGITS` digits (then the
shared :func:`~stalesim.limits.check_int` bounds), no floats, no NaN, every
key known, every value of its field's type; each failure is one
:class:`~stalesim.errors.StalesimError` line naming the field.
"""

from __future__ import annotations

import json
import stat
from dataclasses import fields
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.workloads.transformer import TransformerSpec, get_preset

__all__ = ["MAX_DIGITS", "MAX_SPEC_BYTES", "SPEC_FIELDS", "load_model_spec", "spec_from_mapping"]

# far beyond a real spec (about 400 bytes) yet small enough to read and parse at once
MAX_SPEC_BYTES = 64 << 10
# an integer longer than this is refused before int() (Python's str->int is quadratic in length)
MAX_DIGITS = 12

# field -> type the file must give (the dataclass annotations are strings under postponed evaluation)
_INT = ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab")
_BOOL = ("bias", "tied_embeddings", "learned_positions", "dropout")
_STR = ("name", "ffn_type", "dtype", "norm", "attention")
SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(TransformerSpec))
assert set(SPEC_FIELDS) == set(_INT + _BOOL + _STR), "a TransformerSpec field has no file type"
_EXTRA = ("base",)  # a preset to start from
MAX_NAME = 100


def load_model_spec(path: str | Path) -> TransformerSpec:
    """The spec in ``path`` (``.toml``: TOML, anything else: JSON), checked (module doc)."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise StalesimError(f"model_spec: {p.name} is not a regular file")
        size = st.st_size
        if size > MAX_SPEC_BYTES:
            raise StalesimError(f"model_spec: {p.name} is {size:,} bytes; a model spec is at most "
                                f"{MAX_SPEC_BYTES:,}")
        with p.open("rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise StalesimError(f"model_spec: cannot read {p.name}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:  # grew since stat, or a device file
        raise StalesimError(f"model_spec: {p.name} is over {MAX_SPEC_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StalesimError(f"model_spec: {p.name} is not UTF-8 text") from None
    data = _parse_toml(text, p.name) if p.suffix.lower() == ".toml" else _parse_json(text, p.name)
    return spec_from_mapping(data, default_name=p.stem)


def _parse_json(text: str, name: str) -> Any:
    def bounded_int(s: str) -> int:
        if len(s.lstrip("-")) > MAX_DIGITS:
            raise StalesimError(f"model_spec: an integer of {len(s)} digits in {name} (at most {MAX_DIGITS})")
        return int(s)

    def no_float(s: str) -> float:
        raise StalesimError(f"model_spec: {s} in {name}: every field is an integer, a string or true/false")

    def no_constant(s: str) -> float:
        raise StalesimError(f"model_spec: {s} in {name} is not a value a model spec takes")

    try:
        return json.loads(text, parse_int=bounded_int, parse_float=no_float, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise StalesimError(f"model_spec: {name} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise StalesimError(f"model_spec: {name} nests too deeply (a model spec is one flat table)") from None


def _parse_toml(text: str, name: str) -> Any:
    import tomllib

    def no_float(s: str) -> float:
        raise StalesimError(f"model_spec: {s} in {name}: every field is an integer, a string or true/false")

    try:
        return tomllib.loads(text, parse_float=no_float)
    except StalesimError:  # a ValueError itself: ours, from parse_float, passes as it is
        raise
    except tomllib.TOMLDecodeError as exc:
        raise StalesimError(f"model_spec: {name} is not valid TOML ({str(exc)[:80]})") from None
    except ValueError:  # an integer past Python's digit limit
        raise StalesimError(f"model_spec: an integer in {name} is too long") from None
    except RecursionError:
        raise StalesimError(f"model_spec: {name} nests too deeply (a model spec is one flat table)") from None


def spec_from_mapping(data: Any, *, default_name: str = "custom") -> TransformerSpec:
    """A spec from one flat mapping of field names to values (a parsed file, or flags)."""
    if not isinstance(data, dict):
        raise StalesimError(f"model_spec: expected one table of fields, got {type(data).__name__}")
    unknown = sorted(str(k)[:40] for k in data if k not in SPEC_FIELDS and k not in _EXTRA)
    if unknown:
        raise StalesimError(f"{unknown[0]}: not a model-spec field (known: {', '.join(SPEC_FIELDS + _EXTRA)})")
    for key, v in data.items():
        _check_type(key, v)
    values = {k: v for k, v in data.items() if k in SPEC_FIELDS}
    if "base" in data:
        base = get_preset(data["base"])
        values.setdefault("name", f"{base.name}-custom")
        return base.with_(**values)
    values.setdefault("name", default_name[:MAX_NAME] or "custom")
    missing = [f for f in ("layers", "hidden", "heads") if f not in values]
    if missing:
        raise StalesimError(f"{missing[0]}: required in a model spec (or give base = a preset to start from)")
    return TransformerSpec(**values)


def _check_type(key: str, v: Any) -> None:
    if key in _INT:
        if v is None and key in ("kv_heads", "ffn"):
            return  # the spec's own defaults (multi-head, 4 x hidden)
        if isinstance(v, bool) or not isinstance(v, int):
            raise StalesimError(f"{key}: expected an integer, got {_show(v)}")
    elif key in _BOOL:
        if not isinstance(v, bool):
            raise StalesimError(f"{key}: expected true or false, got {_show(v)}")
    elif not isinstance(v, str):
        raise StalesimError(f"{key}: expected a string, got {_show(v)}")
    elif len(v) > MAX_NAME or not v.isprintable():
        raise StalesimError(f"{key}: expected a printable string of at most {MAX_NAME} characters")


def _show(v: Any) -> str:
    """A value for an error line: short, one line, whatever it is."""
    if isinstance(v, (dict, list)):
        return f"a {'table' if isinstance(v, dict) else 'list'} (a model spec is one flat table)"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
