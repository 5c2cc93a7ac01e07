"""Schedule generators: one small function per schedule of the design table.

A generator maps a :class:`~stalesim.schedule.ir.ScheduleConfig` (``batches`` is
the number of batches of the phase it orders, numbered from 0) to per-device
compute action lists: one list per stage for pipeline schedules, one per worker
for data-parallel ones. Everything else (phases, folding, sends/receives,
validation, versions) is done once for all of them by
:func:`stalesim.schedule.build_schedule`.
"""

from stalesim.schedule.generators import data_parallel, pipelined, register

__all__ = ["data_parallel", "pipelined", "register"]
