"""Where data lives and how per-batch seeds are mixed: shared by the image datasets
(:mod:`stalesim.runtime.data`) and the text stream (:mod:`stalesim.runtime.text`).

Relative data paths resolve against the directory the command started in: ``--data-dir``
within the process (nothing here changes directory), ``$STALESIM_DATA`` by being made
absolute in the environment at the entry (:func:`pin_data_env`), so that processes
started elsewhere inherit the same folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stalesim.errors import StalesimError

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig


def cache_dir() -> Path:
    """``$STALESIM_CACHE``, else ``~/.cache/stalesim``; without a usable home folder (HOME
    unset with no password entry, or naming a folder that does not exist, which we must not
    create) a private per-user folder in the temporary directory. The cache holds only
    verified copies (checked on every use), so where it lives changes no result."""
    env = os.environ.get("STALESIM_CACHE")
    if env:
        return Path(env)
    try:
        home: Path | None = Path.home()
    except (RuntimeError, KeyError):  # no HOME and no password entry for this uid
        home = None
    if home is not None and home.is_dir():
        return home / ".cache" / "stalesim"
    return _private_tmp_cache()


def _private_tmp_cache() -> Path:
    import stat
    import tempfile

    from stalesim.errors import StalesimError

    d = Path(tempfile.gettempdir()) / f"stalesim-cache-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError as exc:
        raise StalesimError(f"cache: no home folder and {d} cannot be made ({exc.strerror}); "
                            "set STALESIM_CACHE to a folder for downloaded data") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise StalesimError(f"cache: no home folder and {d} is not a private folder of this user; "
                            "set STALESIM_CACHE to a folder for downloaded data")
    return d


DATA_ENV = "STALESIM_DATA"
# absolute path -> the text $STALESIM_DATA held before this process pinned it (error messages)
_GIVEN: dict[str, str] = {}


def absolute(given: str) -> Path:
    """``given`` (``~`` expanded) made absolute against the current directory, ``..`` folded
    (symbolic links kept, as the user sees the path)."""
    return Path(os.path.abspath(os.path.expanduser(given)))


def shown(given: str, resolved: Path | None = None) -> str:
    """A path for an error message: as given, and what it resolved to when that differs."""
    path = str(resolved if resolved is not None else absolute(given))
    return repr(given) if path == given else f"{given!r} (resolved to {path})"


def pin_data_env() -> str | None:
    """Make a relative ``$STALESIM_DATA`` absolute, once, against the current directory.

    Called where a command starts (``stalesim``'s ``main``, the notebook runner) and on
    the first read in a process. The environment is what crosses into other processes
    (executor ranks, co-runners, notebook kernels, benchmark workers) and some of them
    start in another directory (a kernel in ``notebooks/``), where the relative text
    would name another folder; pinned, every one of them reads the folder the user
    meant. Returns the absolute path (None when unset).
    """
    given = os.environ.get(DATA_ENV)
    if not given:
        return None
    path = str(absolute(given))
    if path != given:
        _GIVEN[path] = given
        os.environ[DATA_ENV] = path
    return path


def data_root(cfg: TrainConfig) -> Path | None:
    """The data folder of a run: ``cfg.data_dir``, else ``$STALESIM_DATA``, absolute (None:
    neither given). A ``$STALESIM_DATA`` that is not a folder is a one-line error naming
    the text given and the folder it resolved to."""
    if cfg.data_dir:
        return absolute(cfg.data_dir)
    root = pin_data_env()
    if root is None:
        return None
    if not os.path.isdir(root):
        raise StalesimError(f"{DATA_ENV}: {shown(_GIVEN.get(root, root), Path(root))} is not a folder")
    return Path(root)


def check_data_dir(given: str | None, field: str = "data_dir") -> None:
    """A data folder given to a run (``--data-dir``) must be a folder; the error names the
    text given and the folder it resolved to (what it holds is checked when it is read)."""
    if given is None:
        return
    if not isinstance(given, str) or not absolute(given).is_dir():
        raise StalesimError(f"{field}: {shown(given) if isinstance(given, str) else repr(given)} "
                            "is not a folder")


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing; stable across platforms)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)
