"""``stalesim demo``: the main job, end to end, in a few minutes.

Stage 1 (always): build every schedule of the IR and print its derived staleness.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: schedules, prediction, validation, staleness study")
    p.add_argument("--stages", type=int, default=4, help="pipeline depth for the schedule table")
    p.set_defaults(func=run)


def schedule_table(stages: int) -> str:
    from stalesim.schedule import ScheduleConfig, build_schedule, get_spec, schedule_names

    rows = [("schedule", "policy", "staleness per stage", "v_B != v_F on stages", "what")]
    for name in schedule_names():
        cfg = ScheduleConfig(stages=stages, batches=4 * stages + 4, microbatches=stages, workers=2)
        sched = build_schedule(name, cfg)
        v = sched.versions
        rows.append((name, str(sched.policy), str(v.staleness()), str(v.inconsistent_stages() or "-"),
                     get_spec(name).summary))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def run(args: argparse.Namespace) -> int:
    print(f"[1] schedule IR: every schedule at S={args.stages}, staleness derived from the action order")
    print(schedule_table(args.stages))
    return 0
