"""Version-table pass: which weight version each forward and backward reads.

Derived only from each device's action order and the weight policy, never typed
in: stage s's version counter n_s starts at 0 and every ``U(s, t)`` increments it.

- v_F(s, t): n_s when ``F(s, t)`` runs (forwards always read the current weights);
- v_B(s, t): v_F(s, t) under ``stash``/``double-buffer``, else n_s when ``B(s, t)`` runs;
- u(s, t): the value of n_s after ``U(s, t)``, i.e. the update batch t's gradient feeds.

A split backward reads weights twice in a naive reading, so its versions are
defined precisely: ``I`` (the input gradient) reads the weights exactly as
``B`` would (v_B above: the forward's version under ``stash``/``double-buffer``,
else n_s when ``I`` runs); ``W`` (the weight gradient) reads *no* weights of its
own: it combines the activations its forward saved with the intermediate
gradients its ``I`` computed, so it is annotated with, and its runtime unpacks,
the version its ``I`` read: v_W = v_B, even if an update of another batch ran
between the two. The weight gradient therefore is exactly the gradient of the
weights the backward read, as for an unsplit ``B``. Every synchronous
schedule, split or not, updates only after all of a batch's backwards, so the
derived table shows staleness 0 and v_B = v_F for it.

Staleness = u - 1 - v_F (0 for plain SGD); weight inconsistency is v_B != v_F.
The per-action delays the mitigations need (forward delay D_F = u - 1 - v_F,
backward delay D_B = u - 1 - v_B) are answered here too, so no consumer redoes
version arithmetic. :meth:`VersionTable.from_log` builds the same table from the
versions a runtime *used*, which is how measured staleness is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.ir import Schedule

Key = tuple[int, int, int, "int | None"]  # (worker, stage, batch, micro)


@dataclass
class VersionTable:
    """The weight version every forward and backward reads and the update every batch feeds,
    per (worker, stage, batch, micro-batch); built by :func:`derive_versions` from a schedule
    or by :meth:`from_log` from the versions a runtime used."""

    stages: int
    vf: dict[Key, int] = field(default_factory=dict)
    vb: dict[Key, int] = field(default_factory=dict)
    upd: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (worker, stage, batch)

    def v_f(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> int:
        """v_F: the version the forward reads (the updates of ``stage`` before it ran)."""
        return self.vf[(worker, stage, batch, micro)]

    def v_b(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> int:
        """v_B: the version the backward (or a split backward's ``I`` and ``W``) reads."""
        return self.vb[(worker, stage, batch, micro)]

    def u(self, stage: int, batch: int, worker: int = 0) -> int:
        """u: the version the update fed by ``batch`` produces."""
        return self.upd[(worker, stage, batch)]

    def delay_f(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> int:
        """Forward delay D_F = u - 1 - v_F: updates between the weights F read and the
        weights its gradient updates (the staleness of this action)."""
        return self.upd[(worker, stage, batch)] - 1 - self.vf[(worker, stage, batch, micro)]

    def delay_b(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> int:
        """Backward delay D_B = u - 1 - v_B."""
        return self.upd[(worker, stage, batch)] - 1 - self.vb[(worker, stage, batch, micro)]

    def gap(self, stage: int, batch: int, micro: int | None = None, worker: int = 0) -> int:
        """v_B - v_F: how many updates the backward's weights are ahead of the forward's."""
        key = (worker, stage, batch, micro)
        return self.vb[key] - self.vf[key]

    def batch_delay(self, stage: int, batch: int, micro_indices: Iterable[int | None] = (None,),
                    worker: int = 0) -> int:
        """D_F of the update fed by ``batch``: the largest over its micro-batches."""
        return max(self.delay_f(stage, batch, m, worker) for m in micro_indices)

    def staleness_of(self, key: Key) -> int:
        """u - 1 - v_F of one (worker, stage, batch, micro) key: :meth:`delay_f` by key."""
        w, s, t, _ = key
        return self.upd[(w, s, t)] - 1 - self.vf[key]

    def staleness(self) -> list[int]:
        """Per stage, the largest u - 1 - v_F over batches: the steady-state value
        (fill batches see less; for ``hybrid`` this is the stale phase's value)."""
        out = [0] * self.stages
        for key in self.vf:
            out[key[1]] = max(out[key[1]], self.staleness_of(key))
        return out

    def inconsistent_stages(self) -> list[int]:
        """Stages where some backward reads a different version than its forward."""
        return sorted({k[1] for k, v in self.vb.items() if v != self.vf[k]})

    def rows(self) -> list[dict[str, Any]]:
        """One row per (stage, batch); micro-batch/worker detail only where they differ."""
        groups: dict[tuple[int, int], list[Key]] = {}
        for key in self.vf:
            groups.setdefault((key[1], key[2]), []).append(key)
        rows: list[dict[str, Any]] = []
        for (s, t), keys in sorted(groups.items()):
            vals = {(self.vf[k], self.vb[k], self.upd[(k[0], s, t)]) for k in keys}
            if len(vals) == 1:
                vf, vb, u = vals.pop()
                rows.append({"stage": s, "batch": t, "v_f": vf, "v_b": vb, "u": u})
            else:
                for k in sorted(keys, key=lambda k: (k[0], -1 if k[3] is None else k[3])):
                    rows.append({
                        "stage": s, "batch": t, "micro": k[3], "worker": k[0],
                        "v_f": self.vf[k], "v_b": self.vb[k], "u": self.upd[(k[0], s, t)],
                    })
        return rows


    @classmethod
    def from_log(cls, stages: int, entries: Iterable[tuple[Action, int]]) -> VersionTable:
        """The table of versions actually used: ``(action, version)`` pairs where F/B
        give the version read and U the version produced. Rows whose update was not
        logged are left out of :meth:`staleness`."""
        table = cls(stages)
        for a, v in entries:
            key = (a.worker, a.stage, a.batch, a.micro)
            if a.kind is Kind.F:
                table.vf[key] = v
            elif a.kind is Kind.B or a.kind is Kind.I:
                table.vb[key] = v
            elif a.kind is Kind.U:
                table.upd[(a.worker, a.stage, a.batch)] = v
        return table

    def complete_rows(self) -> VersionTable:
        """Only the (worker, stage, batch) rows with an update (a partial log's prefix)."""
        out = VersionTable(self.stages)
        out.upd = dict(self.upd)
        out.vf = {k: v for k, v in self.vf.items() if (k[0], k[1], k[2]) in self.upd}
        out.vb = {k: v for k, v in self.vb.items() if (k[0], k[1], k[2]) in self.upd}
        return out


def derive_versions(sched: Schedule) -> VersionTable:
    """Walk each device's list in order and record the versions (see module doc)."""
    table = VersionTable(sched.stages)
    stash = sched.policy.backward_reads_forward_version
    counter: dict[tuple[int, int], int] = {}
    for acts in sched.device_actions:
        for a in acts:
            ws = (a.worker, a.stage)
            n = counter.get(ws, 0)
            if a.kind is Kind.F:
                table.vf[(a.worker, a.stage, a.batch, a.micro)] = n
            elif a.kind is Kind.B or a.kind is Kind.I:
                key = (a.worker, a.stage, a.batch, a.micro)
                table.vb[key] = table.vf[key] if stash else n
            elif a.kind is Kind.U:
                counter[ws] = n + 1
                table.upd[(a.worker, a.stage, a.batch)] = n + 1
    return table


def annotate(sched: Schedule) -> Schedule:
    """Return a copy whose F/B actions carry the version they read, with the table."""
    table = derive_versions(sched)
    lists = []
    for acts in sched.device_actions:
        out = []
        for a in acts:
            if a.kind is Kind.F:
                a = a.with_version(table.vf[(a.worker, a.stage, a.batch, a.micro)])
            elif a.kind is Kind.B or a.kind is Kind.I or a.kind is Kind.W:
                a = a.with_version(table.vb[(a.worker, a.stage, a.batch, a.micro)])
            out.append(a)
        lists.append(out)
    return replace(sched, device_actions=lists, versions=table)
