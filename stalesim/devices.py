"""The rank list of a real run: ``--devices cpu:N`` or ``--devices cuda:0,1,...``.

Parsed in one neutral place, because the CLI, ``validate``, the demo and the
executor's launcher all need it and none of them should import another for it.
:meth:`Devices.device_for` is the one rank -> device mapping of every local
launch that is not the executor's (``validate``'s steps, the per-message
calibration, ``calibrate``): rank ``r`` of ``cuda:2,3`` is ``cuda:3``, never a
GPU the user did not list, and no two NCCL ranks share a GPU (NCCL refuses a
communicator with two ranks on one device).
"""

from __future__ import annotations

from dataclasses import dataclass

from stalesim.errors import StalesimError
from stalesim.limits import MAX_RANKS


@dataclass(frozen=True)
class Devices:
    """Parsed ``--devices``: ``cpu:N`` or ``cuda:0,1,...`` (or ``cuda:N`` for 0..N-1)."""

    kind: str  # "cpu" | "cuda"
    ids: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def backend(self) -> str:
        return "nccl" if self.kind == "cuda" else "gloo"

    def device_for(self, local_rank: int) -> str:
        """The torch device of rank ``local_rank``: ``cpu`` for every CPU rank, else
        ``cuda:<i>`` with ``i`` the rank's entry of the list (``cuda:2,3``: rank 1 -> ``cuda:3``)."""
        if isinstance(local_rank, bool) or not isinstance(local_rank, int) or not 0 <= local_rank < self.count:
            raise StalesimError(f"--devices: {self} has no rank {local_rank!r} ({self.count} rank(s))")
        return "cpu" if self.kind == "cpu" else f"cuda:{self.ids[local_rank]}"

    def rank_devices(self) -> list[str]:
        """:meth:`device_for` of every rank, in rank order."""
        return [self.device_for(r) for r in range(self.count)]

    def first(self, n: int) -> Devices:
        """The first ``n`` ranks (a 2-rank calibration or the 1-rank baseline of a larger run)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.count:
            raise StalesimError(f"--devices: {self} has {self.count} rank(s), {n!r} needed")
        return Devices(self.kind, self.ids[:n])

    def __str__(self) -> str:
        if self.kind == "cpu":
            return f"cpu:{self.count}"
        return "cuda:" + ",".join(str(i) for i in self.ids)


def rank_gpu(ids: list[int] | tuple[int, ...] | None, local_rank: int, visible: int) -> str:
    """The GPU of an executor rank: entry ``local_rank`` of the launcher's list, or (``ids``
    None: torchrun, one process per GPU) GPU ``local_rank``. Never two ranks on one GPU:
    NCCL refuses a communicator with duplicate devices, so a rank without a GPU of its own
    is a one-line error instead of a wrap-around onto a GPU another rank holds."""
    if ids:
        return Devices("cuda", tuple(int(i) for i in ids)).device_for(local_rank)
    if not 0 <= local_rank < visible:
        raise StalesimError(f"local rank {local_rank}: this node has {visible} visible GPU(s); "
                            f"start at most one rank per GPU (torchrun --nproc-per-node <= {visible})")
    return f"cuda:{local_rank}"


def parse_devices(text: str) -> Devices:
    """``cpu:4``: 4 CPU ranks (gloo); ``cuda:0,1``: one rank per listed GPU (NCCL).

    ``cuda:2`` is the single GPU 2 (a list of one), not a count.
    """
    raw = (text or "").strip().lower()
    kind, sep, rest = raw.partition(":")
    if kind not in ("cpu", "cuda") or not sep or not rest:
        raise StalesimError(f"--devices: expected cpu:N or cuda:0,1,..., got {text!r}")
    if kind == "cpu":
        try:
            n = int(rest)
        except ValueError:
            raise StalesimError(f"--devices: expected cpu:N with N an integer >= 1, got {text!r}") from None
        if n < 1:
            raise StalesimError(f"--devices: expected cpu:N with N >= 1, got {text!r}")
        if n > MAX_RANKS:
            raise StalesimError(f"--devices: {n} ranks are more than this tool starts (at most {MAX_RANKS})")
        return Devices("cpu", tuple(range(n)))
    try:
        ids = tuple(int(p) for p in rest.split(",") if p.strip() != "")
    except ValueError:
        raise StalesimError(f"--devices: expected cuda:0,1,... (GPU indices), got {text!r}") from None
    if not ids or any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise StalesimError(f"--devices: expected distinct GPU indices >= 0, got {text!r}")
    if len(ids) > MAX_RANKS or max(ids) >= MAX_RANKS:
        raise StalesimError(f"--devices: GPU indices must be below {MAX_RANKS}, got {text!r}")
    return Devices("cuda", ids)
