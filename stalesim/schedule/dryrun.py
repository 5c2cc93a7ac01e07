"""Unit-time dry run: executes the action lists with toy durations.

It proves the schedule deadlock-free (every device reaches the end of its list)
and yields a global order that respects every dependency: the emulator replays
exactly this order on one device, and renderers draw it as a step x device grid.
Durations: F, B, I and W take one step each (the zero-bubble papers' unit
F = B = W picture), except that a full B takes two steps in a schedule that
also splits backwards (it is I + W there); LOSS, U, sends, receives and all-reduce
start/wait take none (sends are buffered, an all-reduce completes when its last
worker starts it).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.deps import ardone, dependencies
from stalesim.schedule.ir import Schedule

UNIT_COST = {Kind.F: 1, Kind.B: 1, Kind.I: 1, Kind.W: 1}


@dataclass(frozen=True, slots=True)
class Step:
    """One executed action of the dry run."""

    start: int
    end: int
    device: int
    index: int  # position in its device's list
    action: Action


def dry_run(sched: Schedule) -> list[Step]:
    """Run the schedule with unit costs; return steps in a valid global order.

    Raises ScheduleError naming each stuck device, the step it is stuck at and
    the action it waits on when the schedule deadlocks or depends on an action
    that no device runs.
    """
    lists = sched.device_actions
    done: dict = {}
    ar_issued: dict[tuple[int, int], list[int]] = {}
    pointer = [0] * len(lists)
    clock = [0] * len(lists)
    waiting: dict = {}  # dep key -> devices blocked on it
    heap = [(0, d) for d in range(len(lists)) if lists[d]]
    heapq.heapify(heap)
    steps: list[tuple[int, int, Step]] = []
    seq = 0
    full_b = 2 if sched.split_keys else 1  # next to I and W, a full B is I + W
    # a blocked device's progress through its action's dependencies: (deps, next one, start so
    # far). A done dependency stays done, so a woken device resumes where it stopped rather than
    # re-checking an update's every micro-batch from the first
    blocked: list[tuple[list, int, int] | None] = [None] * len(lists)
    while heap:
        _, d = heapq.heappop(heap)
        acts = lists[d]
        while pointer[d] < len(acts):
            a = acts[pointer[d]]
            progress = blocked[d]
            deps, k, start = progress if progress is not None else (list(dependencies(sched, a)), 0, clock[d])
            missing = None
            while k < len(deps):
                end = done.get(deps[k])
                if end is None:
                    missing = deps[k]
                    break
                if end > start:
                    start = end
                k += 1
            if missing is not None:
                blocked[d] = (deps, k, start)
                waiting.setdefault(missing, []).append(d)
                break
            blocked[d] = None
            end = start + (full_b if a.kind is Kind.B else UNIT_COST.get(a.kind, 0))
            done[a.key] = end
            steps.append((start, seq, Step(start, end, d, pointer[d], a)))
            seq += 1
            clock[d] = end
            pointer[d] += 1
            woken = waiting.pop(a.key, [])
            if a.kind is Kind.AR:
                issued = ar_issued.setdefault((a.stage, a.batch), [])
                issued.append(end)
                if len(issued) == sched.workers:
                    token = ardone(a.stage, a.batch)
                    done[token] = max(issued)
                    woken += waiting.pop(token, [])
            for w in woken:
                heapq.heappush(heap, (clock[w], w))
    stuck = [d for d in range(len(lists)) if pointer[d] < len(lists[d])]
    if stuck:
        raise ScheduleError(_deadlock_message(sched, stuck, pointer, waiting))
    steps.sort(key=lambda x: (x[0], x[1]))
    return [s for _, _, s in steps]


def _fmt_dep(dep: tuple) -> str:
    if dep and dep[0] == "ARDONE":
        return f"all-reduce of stage {dep[1]} batch {dep[2]} on every worker"
    kind, worker, stage, batch, micro = dep
    return str(Action(kind, stage, batch, micro, worker))


def _deadlock_message(sched: Schedule, stuck: list[int], pointer: list[int], waiting: dict) -> str:
    where = {}
    for dep, devices in waiting.items():
        for d in devices:
            where[d] = dep
    parts = []
    for d in stuck:
        a = sched.device_actions[d][pointer[d]]
        dep = where.get(d)
        reason = f"waits on {_fmt_dep(dep)}" if dep is not None else "blocked"
        parts.append(f"device {d} step {pointer[d]} ({a}) {reason}")
    return f"schedule '{sched.name}' deadlocks: " + "; ".join(parts)
