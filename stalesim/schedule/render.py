"""Text views of a schedule: the step x device grid and the version table."""

from __future__ import annotations

from stalesim.schedule.actions import Kind
from stalesim.schedule.dryrun import dry_run
from stalesim.schedule.ir import Schedule

_SHOWN = (Kind.F, Kind.B, Kind.I, Kind.W, Kind.U, Kind.AR, Kind.ARW)


def grid(sched: Schedule, *, max_steps: int = 200) -> str:
    """Unit-time grid: one row per step, one column per device (F/B/I/W take a step;
    the zero-time actions U/AR/ARW are shown in the step where they happen)."""
    cells: dict[tuple[int, int], list[str]] = {}
    last = 0
    for st in dry_run(sched):
        if st.action.kind not in _SHOWN:
            continue
        text = str(st.action.with_version(None))
        cells.setdefault((st.start, st.device), []).append(text)
        last = max(last, st.start)
    n_dev = sched.num_devices
    rows = [["step"] + [f"dev{d}" for d in range(n_dev)]]
    for step in range(min(last + 1, max_steps)):
        rows.append([str(step)] + [" ".join(cells.get((step, d), ["."])) for d in range(n_dev)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if last + 1 > max_steps:
        lines.append(f"... ({last + 1 - max_steps} more steps)")
    return "\n".join(lines)


def version_table(sched: Schedule) -> str:
    """Rows = batches, columns = stages, cells 'v_F/v_B/u'; staleness at the bottom."""
    assert sched.versions is not None
    table: dict[tuple[int, int], str] = {}
    for row in sched.versions.rows():
        key = (row["batch"], row["stage"])
        cell = f"{row['v_f']}/{row['v_b']}/{row['u']}"
        table[key] = cell if key not in table else table[key] + "*"
    S = sched.stages
    rows = [["batch"] + [f"stage{s} vF/vB/u" for s in range(S)]]
    for t in range(sched.batches):
        rows.append([str(t)] + [table.get((t, s), "-") for s in range(S)])
    rows.append(["staleness"] + [str(x) for x in sched.versions.staleness()])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
