"""Rendezvous for process groups that this machine starts itself (no open ports).

``torch.distributed``'s default ``env://`` rendezvous starts a ``TCPStore``
server that listens on *every* interface (IPv4 and IPv6) with no
authentication, and gloo, left alone, binds its pair sockets to the address
the host name resolves to. For ranks that all run on this machine neither is
needed, so local launches (``stalesim run``, ``validate``, ``calibrate``) use:

- a :class:`torch.distributed.FileStore` in a fresh private folder
  (``mkdtemp``: mode 0700, so other users can neither read nor join the
  store), removed when the launch ends;
- gloo's and NCCL's bootstrap sockets on the loopback interface
  (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` = ``lo``) unless the user
  set those variables, which is then their explicit choice.

So a local run listens only on 127.0.0.1. A TCP rendezvous happens only when
the user asks for it: ``--master-addr``/``STALESIM_MASTER_ADDR`` for a local
launch (the address is resolved up front: a bad host is a one-line error), or
``torchrun`` across nodes, whose rendezvous (``--rdzv-endpoint``) is the
user's to secure (docs/executor.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError

LOOPBACK_NAMES = ("lo", "lo0")
LOCAL_ADDR = "127.0.0.1"  # where a local run (and a calibration) listens


def loopback_ifname() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), if there is one."""
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((n for n in LOOPBACK_NAMES if n in names), None)


def loopback_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Variables that keep gloo's and NCCL's sockets on the loopback interface.

    Only the ones not already in ``environ`` (default ``os.environ``): a user who set
    ``GLOO_SOCKET_IFNAME`` chose an interface on purpose.
    """
    env = os.environ if environ is None else environ
    lo = loopback_ifname()
    if lo is None:
        return {}
    return {k: lo for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if not env.get(k)}


def check_master_addr(addr: str, what: str = "--master-addr") -> str:
    """Resolve ``addr`` now, so a typo is one line before anything is spawned."""
    text = (addr or "").strip()
    if not text:
        raise StalesimError(f"{what}: empty host name")
    try:
        socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise StalesimError(f"{what}: cannot resolve {text!r} ({reason})") from None
    return text


def free_port(host: str = LOCAL_ADDR, what: str = "--master-addr") -> int:
    """A TCP port free on ``host`` right now (one-line error if ``host`` is not this machine's)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    except OSError as exc:
        raise StalesimError(f"{what}: cannot listen on {host!r} ({exc.strerror or exc}); "
                            "a local run needs an address of this machine") from None


class PrivateStoreDir:
    """A 0700 folder holding a FileStore; removed by :meth:`cleanup` (or ``with``)."""

    def __init__(self, prefix: str = "stalesim-rdzv-") -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700
        self.store_path = self.path / "store"

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> PrivateStoreDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def init_process_group(rendezvous: dict[str, Any] | None, *, backend: str, rank: int, world: int,
                       timeout: Any, device_id: Any = None) -> None:
    """``dist.init_process_group`` through the launcher's choice.

    ``rendezvous`` is ``{"kind": "file", "path": ...}`` (a local launch: FileStore) or
    ``None``/``{"kind": "env"}`` (``env://``: torchrun or an explicit ``--master-addr``).
    """
    import torch.distributed as dist

    # Import before the group exists: torch.distributed.nn.functional binds ``group.WORLD``
    # as default arguments when it is imported. Imported later (torch pulls it in lazily
    # the first time any TorchDispatchMode runs, e.g. the FlopCounterMode of the
    # partitioner), those defaults hold the live process group, so destroy_process_group
    # no longer destroys it: gloo's worker threads outlive it and are torn down during
    # interpreter shutdown, which can abort the process ("terminate called without an
    # active exception"; see docs/failure.md). Imported now, the defaults are None.
    import torch.distributed.nn  # noqa: F401

    kwargs: dict[str, Any] = {"backend": backend, "timeout": timeout, "rank": rank, "world_size": world}
    if device_id is not None:
        kwargs["device_id"] = device_id
    if rendezvous and rendezvous.get("kind") == "file":
        for k, v in loopback_env().items():  # also when a rank is started by hand from a spec
            os.environ[k] = v
        kwargs["store"] = dist.FileStore(str(rendezvous["path"]), world)
    dist.init_process_group(**kwargs)
