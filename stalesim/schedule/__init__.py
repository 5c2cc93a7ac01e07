"""The schedule IR: actions, schedules, generators, transforms, lowering, checks, versions.

Typical use::

    from stalesim.schedule import build_schedule, ScheduleConfig
    sched = build_schedule(ScheduleConfig("stale", stages=4, batches=16))
    sched.versions.staleness()   # [6, 4, 2, 0]

Every per-schedule fact lives here (:class:`ScheduleSpec` via :func:`get_spec`,
or the built :class:`Schedule`); consumers never compare schedule names.
"""

from stalesim.schedule.actions import Action, Kind
from stalesim.schedule.checks import validate
from stalesim.schedule.dryrun import Step, dry_run
from stalesim.schedule.ir import Phase, Policy, Schedule, ScheduleConfig
from stalesim.schedule.liveness import StageLiveness, stage_liveness
from stalesim.schedule.lowering import lower
from stalesim.schedule.registry import SCHEDULES, build_schedule, get_spec, resolve, schedule_names
from stalesim.schedule.spec import ScheduleSpec
from stalesim.schedule.versions import VersionTable, derive_versions

__all__ = [
    "Action", "Kind", "Step", "dry_run", "Phase", "Policy", "Schedule", "ScheduleConfig", "lower",
    "SCHEDULES", "ScheduleSpec", "StageLiveness", "build_schedule", "get_spec", "resolve",
    "schedule_names", "stage_liveness", "validate", "VersionTable", "derive_versions",
]
