"""How long the demo's validation will take, said before it starts and refined as it runs.

Why: validation is the demo's long step (minutes of silence on a small machine). The
first estimate is its size times costs this machine measured in the earlier steps: every
training step of every run (``repeats`` rounds of each schedule plus the one-rank
baseline, ``iterations`` each, and the emulation's few) at the profiled time of one
training step (step 2, with the other rank busy where that was measured), plus one
process-group start per round at the wall time of the link calibration (step 3 starts
the same two ranks and sends a few messages: an upper bound of a start). It leaves out
the executor's message calibration and the stage-timing passes between rounds (on a
loaded 2-core machine they took as long as the runs), so it is printed as a lower
bound; after the first round it is replaced by that round's measured time (from the
line that starts the rounds) times the rounds still to run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def fmt_eta(seconds: float, lead: str = "about") -> str:
    """``about 40 s`` under two minutes, else ``about 4 min`` (rounded up)."""
    if seconds < 120:
        return f"{lead} {max(1, round(seconds))} s"
    return f"{lead} {-(-int(seconds) // 60)} min"


def validate_estimate_s(*, step_s: float, start_s: float, schedules: int, iterations: int, repeats: int,
                        emulate_iterations: int) -> float:
    """Seconds: (runs x iterations + emulated steps) x ``step_s`` + one start per round."""
    runs = repeats * (schedules + 1)  # each round: every schedule and the one-rank baseline
    steps = runs * iterations + schedules * emulate_iterations
    return steps * step_s + repeats * start_s


ROUND_DONE = re.compile(r"round (\d+)/(\d+) done")
ROUNDS_START = re.compile(r"running \d+ schedule")


@dataclass
class RoundClock:
    """Turns validate's ``round k/K done`` progress lines into ``about N more`` notes, timed
    from its ``running N schedule(s)`` line (before it: the baseline and calibrations)."""

    say: Callable[[str], None]
    t0: float = field(default_factory=lambda: time.perf_counter())

    def __call__(self, msg: str) -> None:
        self.say(msg)
        if ROUNDS_START.search(msg):
            self.t0 = time.perf_counter()
        m = ROUND_DONE.search(msg)
        if m is None:
            return
        k, total = int(m.group(1)), int(m.group(2))
        if k < total:
            per_round = (time.perf_counter() - self.t0) / k
            self.say(f"{k} of {total} rounds in {time.perf_counter() - self.t0:.0f} s: "
                     f"{fmt_eta(per_round * (total - k))} more for the rounds, then the comparison")
