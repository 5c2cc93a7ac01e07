"""The schedule IR: actions, schedules, generators, lowering, validation, versions.

Typical use::

    from stalesim.schedule import build_schedule, ScheduleConfig
    sched = build_schedule("stale", ScheduleConfig(stages=4, batches=16))
    sched.versions.staleness()   # [6, 4, 2, 0]
"""

from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.dryrun import Step, dry_run
from stalesim.schedule.ir import Policy, Schedule, ScheduleConfig
from stalesim.schedule.lowering import lower
from stalesim.schedule.registry import SCHEDULES, build_schedule, get_spec, schedule_names
from stalesim.schedule.validate import validate
from stalesim.schedule.versions import VersionTable, derive_versions

__all__ = [
    "Action", "Kind", "Step", "dry_run", "Policy", "Schedule", "ScheduleConfig", "lower",
    "SCHEDULES", "build_schedule", "get_spec", "schedule_names", "validate", "VersionTable",
    "derive_versions",
]
