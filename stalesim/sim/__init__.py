"""Simulator: SimPy event simulation of the schedule IR, a closed-form fast path,
memory model, Chrome traces and Gantt figures::

    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate
    r = simulate(profile, ScheduleConfig("stale", stages=4), options=SimOptions(method="fast"))
    r.iteration_time_s, r.speedup, r.peak_memory_bytes
    r.write_trace("t.json"); r.plot("g.png")

The trace writer (:mod:`stalesim.trace`) is neutral: the executor writes the same format.
"""

from stalesim.sim.api import SimOptions, default_batches, simulate
from stalesim.sim.model import SimHardware, StageCosts, uniform_costs
from stalesim.sim.result import SimResult
from stalesim.trace import Flow, TraceEvent, chrome_trace, write_chrome_trace

__all__ = [
    "Flow",
    "SimHardware",
    "SimOptions",
    "SimResult",
    "StageCosts",
    "TraceEvent",
    "chrome_trace",
    "default_batches",
    "simulate",
    "uniform_costs",
    "write_chrome_trace",
]
