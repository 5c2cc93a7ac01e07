"""Your own code on the command line: ``--model pkg.module:factory``, ``--dataset pkg.module:factory``.

The field's convention for naming a Python object on a command line (torchrun's entry
points, Hydra's ``_target_``, uvicorn's ``module:app``): a dotted module path, a colon, the
name of a callable in it. :func:`resolve` imports the module and returns the callable; the
one place every command, the emulator and every rank of the executor go through, so a typo
is one line (``stalesim: error: --model: ...``, exit status 2) wherever it is given.

Where modules are found: ``sys.path`` plus the folder the command started in (as
``python -m`` and uvicorn do; the ``stalesim`` console script alone would not look there).
A resolved module's import root (the folder holding its top-level package) is what
:func:`import_roots` reports, so the executor's ranks, which are other processes, can put it
on their ``sys.path`` before they import it (:func:`add_import_roots`).

This module is free of torch; what the factories must return is checked where it is used
(:mod:`stalesim.workloads.own` for models, :mod:`stalesim.runtime.owndata` for data sets).

The user's code is fenced: an exception, and also ``sys.exit()`` (``SystemExit``, which
``except Exception`` lets through, so a factory that exits used to end the command with
status 0 as if it had run), while importing the module or calling the factory is one line
naming the flag and the factory. :func:`user_exit` says whether a ``SystemExit`` that
reached the command line came from the user's code (a model's ``forward`` or a data set's
``__getitem__`` during training), so the entry point reports it the same way. With
:data:`DEBUG_ENV` set (``STALESIM_DEBUG=1``) the user's own traceback is printed to stderr
before that line, to find the failing line in the user's code.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from stalesim.errors import StalesimError

# module.path:attr (attr may be dotted: a factory on a class or a submodule's object);
# every part a Python identifier, so zoo names with a colon (gpt-char:n_layer=2) never match
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SPEC = re.compile(rf"^({_IDENT}(?:\.{_IDENT})*):({_IDENT}(?:\.{_IDENT})*)$")
# set (to anything but "" or "0"): the user's own traceback goes to stderr before the one-line error
DEBUG_ENV = "STALESIM_DEBUG"
# the packages of this tool (found, not imported): a SystemExit raised in their code is the tool's own
_OWN_PACKAGES = ("stalesim",)


def is_plugin(text: object) -> bool:
    """Whether ``text`` names user code (``pkg.module:factory``) rather than a built-in name."""
    return isinstance(text, str) and _SPEC.match(text.strip()) is not None


def split_spec(text: str, flag: str) -> tuple[str, str]:
    """(module, attribute) of ``pkg.module:factory``; StalesimError naming ``flag`` otherwise."""
    m = _SPEC.match(str(text).strip())
    if m is None:
        raise StalesimError(f"{flag}: expected pkg.module:factory (a module path, a colon, a "
                            f"callable in it), got {text!r}")
    return m.group(1), m.group(2)


def _with_start_dir() -> None:
    """The folder the command started in is searched, as with ``python -m`` (a console script
    puts its own bin folder first instead)."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def resolve(text: str, flag: str) -> Callable[..., Any]:
    """The callable ``pkg.module:factory`` names, imported now.

    A module that cannot be imported (including an error raised while importing it), a
    missing attribute or one that is not callable is a one-line StalesimError naming
    ``flag`` (``--model`` or ``--dataset``) and the reason."""
    modname, attr = split_spec(text, flag)
    _with_start_dir()
    try:
        module = importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name and (modname == exc.name or modname.startswith(exc.name + ".")):
            raise StalesimError(f"{flag}: cannot import module {modname!r} (not found on sys.path or in "
                                f"{os.getcwd()}; put its folder on PYTHONPATH)") from None
        raise StalesimError(f"{flag}: importing {modname!r} failed: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:  # the module exits at import (a script's sys.exit(main()))
        debug_traceback(exc)
        raise StalesimError(f"{flag}: importing {modname!r} called sys.exit({brief_code(exc)}); a module "
                            "that holds a factory must not exit when imported") from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing: one line
        debug_traceback(exc)
        raise StalesimError(f"{flag}: importing {modname!r} failed: {type(exc).__name__}: "
                            f"{first_line(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise StalesimError(f"{flag}: module {modname!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise StalesimError(f"{flag}: {text.strip()} is a {type(obj).__name__}, not a callable "
                            "(name a function that builds it)")
    return obj  # type: ignore[no-any-return]


def call_factory(text: str, flag: str) -> Any:
    """``resolve(text)()``: an exception inside the factory is one line naming ``flag``."""
    factory = resolve(text, flag)
    try:
        return factory()
    except StalesimError:
        raise
    except SystemExit as exc:
        debug_traceback(exc)
        raise StalesimError(f"{flag}: {text.strip()}() called sys.exit({brief_code(exc)}); a factory must "
                            "return its object") from None
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: say where, in one line
        debug_traceback(exc)
        raise StalesimError(f"{flag}: {text.strip()}() raised {type(exc).__name__}: {first_line(exc)}") from None


def user_exit(exc: SystemExit) -> str | None:
    """The one-line error for a ``SystemExit`` raised by the user's code (the innermost
    Python frame it passed is outside this tool's packages and Python's standard library:
    a factory's model or data set calling ``sys.exit()`` while it trains), or None for the
    tool's own exits (argparse, ``raise SystemExit(main())``), which keep their status."""
    stdlib = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
    # the innermost frame outside the standard library (``exit()`` and argparse live there)
    where = next((f for f in reversed(traceback.extract_tb(exc.__traceback__))
                  if not (os.path.abspath(f.filename).startswith(stdlib) and "site-packages" not in f.filename)),
                 None)
    if where is None or os.path.abspath(where.filename).startswith(_own_roots()):
        return None
    debug_traceback(exc)
    return (f"user code called sys.exit({brief_code(exc)}) at {os.path.basename(where.filename)}:{where.lineno} "
            f"(in {where.name}); the command did not finish")


def _own_roots() -> tuple[str, ...]:
    import importlib.util

    roots = []
    for name in _OWN_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            roots.append(os.path.abspath(folder) + os.sep)
    return tuple(roots)


def brief_code(exc: SystemExit) -> str:
    text = repr(exc.code)
    return text if len(text) <= 40 else text[:37] + "..."


def debug_traceback(exc: BaseException) -> None:
    """The user's traceback on stderr when :data:`DEBUG_ENV` asks for it (before the one-line
    error a caller raises for a failure in the user's code)."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        tb: TracebackType | None = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def import_roots(specs: Iterable[str | None]) -> list[str]:
    """The folders the ranks need on ``sys.path`` to import the user's modules named in
    ``specs`` (built-in names are skipped): for ``pkg.sub.mod`` imported from
    ``/home/me/proj/pkg/sub/mod.py``, ``/home/me/proj``. Call after :func:`resolve`."""
    roots: list[str] = []
    for text in specs:
        if not is_plugin(text):
            continue
        modname, _ = split_spec(str(text), "module")
        if modname == "__main__":
            raise StalesimError(f"model: {text} is defined in __main__ (a notebook or a script); the ranks "
                                "are other processes and import it by name: put it in a module file")
        module = sys.modules.get(modname)
        path = getattr(module, "__file__", None)
        if not path:
            continue  # a namespace package or a built-in module: importable as is
        root = os.path.dirname(os.path.abspath(path))
        depth = modname.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)
        for _ in range(depth):
            root = os.path.dirname(root)
        if root not in roots:
            roots.append(root)
    return roots


def add_import_roots(roots: Iterable[str]) -> None:
    """Put ``roots`` (from :func:`import_roots`) first on this process's ``sys.path``."""
    for root in reversed(list(roots)):
        if root not in sys.path:
            sys.path.insert(0, root)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"
