"""Simulator: SimPy event simulation of the schedule IR, a closed-form fast path,
memory model, Chrome traces and Gantt figures.

    from stalesim.sim import simulate
    r = simulate(profile, "stale", stages=4)          # SimResult
    r.iteration_time_s, r.speedup, r.peak_memory_bytes
    r.write_trace("t.json"); r.plot("g.png")

The trace writer (:mod:`stalesim.sim.trace`) is shared with the executor.
"""

from stalesim.sim.api import default_batches, simulate, steady_window
from stalesim.sim.model import SimHardware, StageCosts, uniform_costs
from stalesim.sim.result import SimResult
from stalesim.sim.trace import Flow, TraceEvent, chrome_trace, write_chrome_trace

__all__ = [
    "Flow",
    "SimHardware",
    "SimResult",
    "StageCosts",
    "TraceEvent",
    "chrome_trace",
    "default_batches",
    "simulate",
    "steady_window",
    "uniform_costs",
    "write_chrome_trace",
]
