"""Structural validation of a schedule: every action exactly once, on the right
device, sends paired with receives, and deadlock-free (via the dry run).

Every (worker, stage, batch, micro) runs F (plus LOSS on a loss stage) and
either one B or an I and a W (never both: a split backward is I + W).

Errors point at the offending device and step.
"""

from __future__ import annotations

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.deps import peer
from stalesim.schedule.dryrun import Step, dry_run
from stalesim.schedule.ir import Schedule


def expected_compute(sched: Schedule) -> set[tuple]:
    """Keys of the compute actions a schedule with these dimensions must contain."""
    keys: set[tuple] = set()
    micros = sched.micro_indices()
    for r in range(sched.workers):
        for s in range(sched.stages):
            for t in range(sched.batches):
                keys.add((Kind.U, r, s, t, None))
                for m in micros:
                    keys.add((Kind.F, r, s, t, m))
                    if sched.splits(s, t, m, r):
                        keys.add((Kind.I, r, s, t, m))
                        keys.add((Kind.W, r, s, t, m))
                    else:
                        keys.add((Kind.B, r, s, t, m))
                    if sched.has_loss(s):
                        keys.add((Kind.LOSS, r, s, t, m))
    return keys


def validate(sched: Schedule) -> list[Step]:
    """Raise ScheduleError on the first problem; return the dry-run timeline."""
    seen: dict[tuple, tuple[int, int]] = {}
    for d, acts in enumerate(sched.device_actions):
        for i, a in enumerate(acts):
            if a.key in seen:
                pd, pi = seen[a.key]
                raise ScheduleError(
                    f"action {a} appears twice: device {pd} step {pi} and device {d} step {i}"
                )
            seen[a.key] = (d, i)
            if not 0 <= a.stage < sched.stages or not 0 <= a.batch < sched.batches:
                raise ScheduleError(f"device {d} step {i} ({a}): stage or batch out of range")
            if not 0 <= a.worker < sched.workers:
                raise ScheduleError(f"device {d} step {i} ({a}): worker out of range")
            if sched.device_of(a.stage, a.worker) != d:
                raise ScheduleError(
                    f"device {d} step {i} ({a}): stage {a.stage} is placed on device "
                    f"{sched.device_of(a.stage, a.worker)}"
                )
            if (a.micro is not None) != sched.uses_micro and a.kind not in (Kind.U, Kind.AR, Kind.ARW):
                raise ScheduleError(f"device {d} step {i} ({a}): micro-batch index mismatch")
            if (a.kind in (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B)) and not sched.lowered:
                raise ScheduleError(f"device {d} step {i} ({a}): send/receive in an unlowered schedule")
    expected = expected_compute(sched)
    for key, (d, i) in seen.items():
        if key[0] is Kind.B and (Kind.I, *key[1:]) in seen:
            raise ScheduleError(f"device {d} step {i} ({sched.device_actions[d][i]}): a backward "
                                f"runs as B or as I + W, not both")
        if key[0] is Kind.W and (Kind.I, *key[1:]) not in seen:
            raise ScheduleError(f"device {d} step {i} ({sched.device_actions[d][i]}): W without its I")
    missing = expected - seen.keys()
    if missing:
        example = min(missing, key=lambda k: (k[3], k[2], k[0].value))
        kind, worker, stage, batch, micro = example
        raise ScheduleError(
            f"schedule '{sched.name}' is missing {len(missing)} action(s), e.g. "
            f"{Action(kind, stage, batch, micro, worker)}"
        )
    for key, (d, i) in seen.items():
        kind = key[0]
        if kind in (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B):
            a = sched.device_actions[d][i]
            partner = peer(a)
            if partner is not None and partner not in seen:
                kind_, w, s, t, m = partner
                raise ScheduleError(
                    f"device {d} step {i} ({a}) has no matching {Action(kind_, s, t, m, w)}"
                )
        if kind is Kind.AR and (Kind.ARW, *key[1:]) not in seen:
            raise ScheduleError(f"device {d} step {i}: all-reduce start without a wait")
    return dry_run(sched)
