"""Schedule transforms: passes over the IR that every consumer shares.

* **Phases** (:func:`plan_phases`, :func:`join_phases`): a run is a sequence of
  batch ranges, each ordered by one generator. The synchronous warm-up runs the
  first K batches as the schedule's staleness-free counterpart (``sequential``
  for whole-batch pipelines, ``gpipe`` for micro-batch ones, ``dp`` for
  Pipe-SGD), then the schedule proper; ``hybrid`` is ``stale`` up to the switch
  and ``sequential`` after it. Phases are joined per device list: every action
  of a phase comes after every action of the previous phase on the same device,
  so the pipeline drains at each boundary, as a real run that changes its
  schedule would.
* **Folding** (:func:`fold`): the devices (one stage each, or V virtual stages
  each) merged contiguously onto fewer devices.

Being IR passes, the warm-up, the switch and folding mean the same thing to the
simulator, the emulator and the executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from stalesim.schedule.actions import Action
from stalesim.schedule.dryrun import dry_run
from stalesim.schedule.ir import Phase, Schedule, ScheduleConfig
from stalesim.schedule.spec import ScheduleSpec

SpecLookup = Callable[[str], ScheduleSpec]


def plan_phases(spec: ScheduleSpec, cfg: ScheduleConfig, get_spec: SpecLookup) -> list[Phase]:
    """The phases of a run of ``cfg.batches`` batches (cheap: no actions built).

    ``get_spec`` looks up the specs of the warm-up and switch schedules.
    """
    N = cfg.batches or 0
    K = min(cfg.warmup, N) if spec.warmup_with is not None else 0
    phases: list[Phase] = []
    if K:
        phases.append(Phase(spec.warmup_with or spec.name, 0, K))
    if spec.switch_to is not None:
        switch = max(K, min(N // 2 if cfg.switch is None else cfg.switch, N))
        if switch > K:
            phases.append(Phase(spec.name, K, switch))
        if switch < N:
            phases.append(Phase(spec.switch_to, switch, N))
    elif N > K:
        phases.append(Phase(spec.name, K, N))
    for p in phases:
        other = get_spec(p.schedule)
        if (other.data_parallel != spec.data_parallel or other.local_loss != spec.local_loss
                or other.placement != spec.placement or other.uses_micro != spec.uses_micro):
            raise AssertionError(f"phase {p.schedule} cannot join {spec.name}")  # registry bug
    return phases


def _shift(acts: list[Action], k: int) -> list[Action]:
    return acts if k == 0 else [replace(a, batch=a.batch + k) for a in acts]


def join_phases(phases: list[Phase], cfg: ScheduleConfig, n_lists: int,
                get_spec: SpecLookup) -> list[list[Action]]:
    """Generate each phase (batches renumbered from its first) and concatenate per list."""
    lists: list[list[Action]] = [[] for _ in range(n_lists)]
    for p in phases:
        gen = get_spec(p.schedule).generator
        part = gen(replace(cfg, batches=p.batches, switch=None, warmup=0))
        for i, acts in enumerate(part):
            lists[i].extend(_shift(acts, p.first))
    return lists


def fold(sched: Schedule, devices: int) -> Schedule:
    """Merge the schedule's devices contiguously onto ``devices`` devices.

    Device d goes to d * devices // n (n = the devices before folding: S for
    one stage per device, S / V with virtual stages). The actions of one new
    device are merged in the order of the unfolded dry run, which is a
    topological order of their dependencies, so the folded schedule cannot
    deadlock. Each stage keeps its own relative order, hence its version table.
    ``devices=1`` gives the single-device baseline.
    """
    n = sched.num_devices
    new_dev = [d * devices // n for d in range(n)]
    merged: list[list[Action]] = [[] for _ in range(devices)]
    for step in dry_run(sched):
        merged[new_dev[step.device]].append(step.action)
    placement = [[new_dev[d] for d in row] for row in sched.placement]
    return replace(sched, device_actions=merged, placement=placement, lowered=False, versions=None)
