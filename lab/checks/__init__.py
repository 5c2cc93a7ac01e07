"""Reliability checks of the user paths, each case in a fresh ``python -m stalesim`` process.

Neither a benchmark (nothing is timed) nor a unit test (minutes each, real processes):
a check that the installed CLI refuses bad input cleanly and leaves nothing behind.

* :mod:`lab.checks.probe_inputs`: every bad-input case of docs/failure.md must exit 2 with
  one ``stalesim: error:`` line (and every large-but-valid one exit 0), never a traceback.
* :mod:`lab.checks.soak_run`: many short ``stalesim run`` jobs back to back, counting
  failures and ranks that outlive their launcher.
"""
