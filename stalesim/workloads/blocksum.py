"""Does a profile's block-by-block time explain the whole-model step it was measured beside?

Every prediction (simulate, sweep, plan) times a stage as the sum of its blocks' measured
forward, backward and update seconds. The profiler also times the whole model's step in
one piece in the same rounds (:mod:`stalesim.workloads.profiler`), and stores
``sum_over_whole_ratio`` = (sum of the blocks) / (whole step). Near 1 the blocks are the
step; far from it, the per-block numbers do not describe the run the ranks will make, and
every prediction built on them inherits the factor before any schedule effect.

**Bound.** A ratio outside [1/2, 2] gets one warning: beyond a factor of two the blocks
explain less than half (or more than twice) the measured step. The band is wide on
purpose: a small model's step legitimately carries per-call costs (loss, ``zero_grad``,
Python dispatch) that no block owns, so the sum sits below the whole (LeNet-5 at one thread
gave 0.59 on a shared 2-core machine), and such a profile is still
the right input; what falls outside is a different measurement. The usual cause is the
thread count: on that machine torch's default of 2 threads gave 0.05-0.29 (the several
threads of one process wait on each other and on every other process, and the one long
whole-model call and the many short block calls are hit unequally), while the ranks run
one thread each (:data:`stalesim.workloads.profiler.RANK_THREADS`), so the fix is one
thread. At one thread the cause is the machine or the size: other work, or blocks so short
that timer and dispatch costs dominate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stalesim.workloads.profile import Profile

# the band of sum_over_whole_ratio within which a profile is taken as it is (module doc)
BLOCK_SUM_LOW = 0.5
BLOCK_SUM_HIGH = 2.0


def block_sum_warning(prof: Profile) -> str | None:
    """One line when the profile's block sum and whole-model time disagree beyond the bound
    (what they are, and what to do); ``None`` within it or when the profile has no ratio (a
    roofline estimate, a file without a whole-model time)."""
    ratio = prof.sum_over_whole_ratio
    if ratio is None or BLOCK_SUM_LOW <= ratio <= BLOCK_SUM_HIGH:
        return None
    what = (f"the blocks' summed time is {ratio:.2f}x the whole-model step "
            f"(bound {BLOCK_SUM_LOW:g}-{BLOCK_SUM_HIGH:g}x), so predictions from this profile are off by "
            "about that factor")
    if prof.device == "cpu" and (prof.threads or 0) > 1:
        fix = (f"it ran {prof.threads} torch threads and the ranks run 1: profile with --threads 1 "
               "(threads=1 in stalesim.profile)")
    else:
        fix = ("re-profile on a quiet machine, with more --repeats, or at a larger --batch-size "
               "(per-call costs dominate small blocks)")
    return f"{what}; {fix}"
