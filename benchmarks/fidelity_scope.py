"""Scope of the fidelity campaign (``bench_fidelity``): iterations per run and a duration
estimate, both from a probe of the machine taken at the start.

Why: a fixed iteration count is wrong both ways on this 2-core machine. LeNet-5 steps
take milliseconds, so 40 iterations give a steady window of a fraction of a second
(scheduler slices of 4 ms are then several percent of it); ResNet-20 at batch 128 takes
about a second per step, so 40 iterations x 14 runs x 5 repeats is most of an hour for
one configuration. Each run instead gets the iterations that give it a steady window
of about ``target_s`` seconds (within ``[lo, hi]``), and the campaign prints how long it
should take before it starts, from one measured whole-model training step per (model,
batch) and the fixed costs of a ``validate`` measured on this machine.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

# Measured on this machine (bench_fidelity --quick, LeNet-5 B=32, load ~0.6-1): the fixed
# part of one validate (calibrate the link and per-message costs, co-runner start, report
# and figures) and the launch/teardown of one executor run inside a batch of runs.
VALIDATE_FIXED_S = 12.0
RUN_OVERHEAD_S = 0.45
# a 2-rank schedule's iteration relative to the 1-rank step (quiet ResNet-20 runs of the
# ten original schedules: 0.52-0.95, mean 0.72); the profile times every layer forward and
# backward about 1.5x a step's worth per repeat and size (alone and contended)
TWO_RANK_FACTOR = 0.75
PROFILE_STEPS_PER_REPEAT = 3.0


def probe_step_s(model: str, batch: int, *, threads: int = 1, reps: int = 3) -> float:
    """Median wall time of one whole-model training step (forward, loss, backward, SGD
    update) at ``batch`` on one CPU thread, after one warm-up step."""
    import torch

    from stalesim.runtime.tasks import loss_fn
    from stalesim.workloads.names import model_task
    from stalesim.workloads.zoo import build_model

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        m = build_model(model, seed=0)
        x = m.example_input(batch)
        if x.is_floating_point():
            x = torch.randn_like(x)
        with torch.no_grad():
            out = m(x[:1])
        # classification: (B, C) -> labels (B,); language model: (B, T, V) -> targets (B, T)
        y = torch.randint(0, out.shape[-1], (batch, *out.shape[1:-1]))
        lf = loss_fn(model_task(model) or "classify")
        opt = torch.optim.SGD(m.parameters(), lr=1e-6, momentum=0.9)
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            lf(m(x), y).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])
    finally:
        torch.set_num_threads(old)


def iterations_for(step_s: float, *, target_s: float = 3.0, lo: int = 12, hi: int = 200) -> int:
    """Iterations giving a 2-rank run about ``target_s`` of measured time (clamped)."""
    if step_s <= 0:
        return hi
    n = round(target_s / (step_s * TWO_RANK_FACTOR))
    return max(lo, min(hi, n))


@dataclass(frozen=True)
class ValidatePlan:
    """One ``validate`` of the campaign, with what its duration depends on."""

    name: str
    step_s: float  # the probe: one 1-rank step at the batch
    micro_step_s: float  # the probe at the smallest action batch (profiled too)
    schedules: int  # 2-rank schedules measured
    iterations: int
    repeats: int
    profile_repeats: int
    emulate_iterations: int = 2
    calibrates: bool = True  # False where the campaign reuses a calibration

    def estimate_s(self) -> float:
        runs = self.repeats * (self.schedules * (self.iterations * self.step_s * TWO_RANK_FACTOR
                                                 + RUN_OVERHEAD_S)
                               + self.iterations * self.step_s + RUN_OVERHEAD_S)
        emulate = (self.schedules + 1) * self.emulate_iterations * self.step_s
        profile = (2 * self.profile_repeats * PROFILE_STEPS_PER_REPEAT * (self.step_s + self.micro_step_s)
                   if self.calibrates else 0.0)
        # the version-hook / LOSS / data calibration: 18 forward+backward per stage at the
        # action batch, for about three stage layouts (the shared PPV, virtual stages, dp)
        hooks = 3 * 18 * self.micro_step_s if self.calibrates else 0.0
        return runs + emulate + profile + hooks + VALIDATE_FIXED_S


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
