"""Where data lives and how per-batch seeds are mixed: shared by the image datasets
(:mod:`stalesim.runtime.data`) and the text stream (:mod:`stalesim.runtime.text`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

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


def data_root(cfg: TrainConfig) -> Path | None:
    root = cfg.data_dir or os.environ.get("STALESIM_DATA")
    return Path(root).expanduser() if root else None


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing; stable across platforms)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)
