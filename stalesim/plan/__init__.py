"""``stalesim plan``: which schedule reaches the target loss first on the user's hardware.

The emulator answers *how many iterations* a schedule with its staleness needs to reach
a target; the simulator answers *how long one iteration takes* on hardware the user does
not own and how much memory each device needs. A plan multiplies them, candidate by
candidate, and ranks the products:

* :mod:`~stalesim.plan.candidates`: the grid (schedules that fit the device count x
  mitigations x optimizers x searched warm-up / hybrid switch points) and, per
  candidate, the emulation config that determines its convergence;
* :mod:`~stalesim.plan.convergence`: emulations (cached in the output folder, reused
  across plans for other hardware), iterations to target per seed and their interval;
* :mod:`~stalesim.plan.confirm`: a ``--batched`` plan's crossings confirmed by single
  emulations (the runs the executor reproduces);
* :mod:`~stalesim.plan.timing`: the simulation of each candidate on the target, each
  phase (warm-up, hybrid switch) at its own speed, and its peak memory per device;
* :mod:`~stalesim.plan.compose`: time to target with its interval, feasibility,
  ranking, speed-ups (pure arithmetic, tested on constructed inputs);
* :mod:`~stalesim.plan.report`: terminal table, JSON, CSV and the Pareto figure;
* :mod:`~stalesim.plan.check`: the end-to-end check on this machine (executor runs).

See docs/plan.md for how the number is composed and where its uncertainty comes from.
"""
