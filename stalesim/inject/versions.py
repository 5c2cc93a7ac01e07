"""The weight versions a user's training loop keeps, read from the schedule's version table.

In a user's loop batch t runs its whole forward and backward before ``optimizer.step()``
applies its update, so the update of batch t must be the (t+1)-th of every stage
(u(s, t) = t + 1 in the IR's table: one update per batch, in batch order; every
schedule of the registry has it, for every data-parallel worker too). Then every version a batch reads is
one of those already made: v_F(s, t) and v_B(s, t) are < u(s, t) = t + 1, so at step t
the live weights are version t and the older ones a later batch still reads are
stashed copies.

:class:`VersionStore` keeps exactly those: just before the step of batch t overwrites
version t it copies stage s's weights only if a later batch reads version t of stage s
(``last_read``, counted from the table), and drops a copy once the batch that reads it
last has stepped. Memory beyond plain training is the stash, no more (``peak_bytes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from stalesim.errors import StalesimError
from stalesim.schedule import VersionTable


def check_table(table: VersionTable, stages: int, steps: int, workers: int = 1) -> None:
    """Refuse a table a user's loop cannot follow: an update that is not the (t+1)-th of its
    (worker, stage) (one line, naming the first offending row). With several workers the loop
    keeps one model for all of them (:mod:`stalesim.inject.workers`), so every worker's update
    of batch t must be that one too."""
    for r in range(workers):
        for s in range(stages):
            for t in range(steps):
                u = table.upd.get((r, s, t))
                if u != t + 1:
                    who = f"worker {r}'s stage {s}" if workers > 1 else f"stage {s}"
                    raise StalesimError(f"schedule: {who}'s update of batch {t} is its update {u}; a "
                                        f"training loop applies it as update {t + 1} (one per batch, in order)")


def last_reads(table: VersionTable, stages: int) -> list[dict[int, int]]:
    """Per stage, version -> the last batch whose forward or backward reads it."""
    out: list[dict[int, int]] = [{} for _ in range(stages)]
    for vers in (table.vf, table.vb):
        for (_, s, t, _), v in vers.items():
            if out[s].get(v, -1) < t:
                out[s][v] = t
    return out


class VersionStore:
    """The live weights (version ``version``) and the stashed older versions per stage."""

    def __init__(self, table: VersionTable, params: Sequence[Sequence[torch.nn.Parameter]]) -> None:
        self.params = [list(ps) for ps in params]
        self.last_read = last_reads(table, len(self.params))
        self.version = 0
        self.stash: list[dict[int, list[torch.Tensor]]] = [{} for _ in self.params]
        self.peak_bytes = 0

    def weights(self, stage: int, version: int) -> list[torch.Tensor]:
        """The tensors of ``version`` of ``stage``: the live parameters' data or a copy."""
        if version == self.version:
            return [p.detach() for p in self.params[stage]]
        try:
            return self.stash[stage][version]
        except KeyError:
            raise StalesimError(f"stage {stage} has no weight version {version} (live {self.version}, kept "
                                f"{sorted(self.stash[stage])}); a backward ran after its step?") from None

    def before_update(self) -> None:
        """Called before the step of batch ``version``, whose reads are all done: drop the
        copies no later batch reads, then copy the live version where a later batch reads it
        (dropping first, so a copy and the one it replaces are never held together)."""
        n = self.version
        for s, kept in enumerate(self.stash):
            for v in [v for v in kept if self.last_read[s].get(v, -1) <= n]:
                del kept[v]
        for s, ps in enumerate(self.params):
            if self.last_read[s].get(n, -1) > n and n not in self.stash[s]:
                self.stash[s][n] = [p.detach().clone() for p in ps]
        self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def after_update(self) -> None:
        """The step of batch ``version`` ran: the live weights are the next version."""
        self.version += 1

    def state_dict(self) -> dict[str, Any]:
        """The live version and the copies kept (tensors and plain data, for ``torch.save``)."""
        return {"version": self.version, "peak_bytes": self.peak_bytes,
                "stash": [{v: list(ws) for v, ws in kept.items()} for kept in self.stash]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the copies are moved to the live parameters' device and dtype."""
        stash = state["stash"]
        if len(stash) != len(self.params):
            raise StalesimError(f"state_dict: {len(stash)} stages saved, this pipeline has {len(self.params)}")
        self.version = int(state["version"])
        self.peak_bytes = int(state["peak_bytes"])
        self.stash = [{int(v): [w.to(p.device, p.dtype) for w, p in zip(ws, ps)] for v, ws in kept.items()}
                      for kept, ps in zip(stash, self.params)]

    def nbytes(self) -> int:
        """Bytes of the stashed copies now."""
        return sum(w.numel() * w.element_size() for kept in self.stash for ws in kept.values() for w in ws)
