"""Stage -> device placements: which device runs each of the S stages.

* ``contiguous``: one stage per device (stage s on device s); folding then
  merges neighbours (:func:`stalesim.schedule.transforms.fold`).
* ``loop``: V model chunks per device, Megatron's interleaved placement
  (Narayanan et al., SC'21): R = S / V devices, stage s on device s mod R, so
  device r holds stages r, r + R, r + 2R, ... and every chunk boundary crosses
  devices (except with R = 1).
* ``v``: the V shape of ZB-V (Qi et al., ICLR'24) and DualPipeV (DeepSeek-V3):
  stages 0..R-1 go down the devices and stages R..2R-1 come back up, so device
  r holds stages r and 2R-1-r; the loss (last stage) is on device 0 and the
  turn (stages R-1 -> R) stays on device R-1. With V > 2 the shape zig-zags.

Device ``r`` runs its stages in increasing order as its "chunk 0, 1, ...";
:func:`chunks_of` lists them.
"""

from __future__ import annotations

from stalesim.errors import ScheduleError

PLACEMENTS = ("contiguous", "loop", "v")


def stage_devices(kind: str, stages: int, per_device: int = 1) -> list[int]:
    """``out[s]`` = the device of stage ``s`` (S = ``stages``, V = ``per_device``)."""
    S, V = stages, per_device
    if V < 1 or S % V:
        raise ScheduleError(f"stages_per_device: {V} does not divide stages={S}")
    R = S // V
    if kind == "contiguous":
        if V != 1:
            raise ScheduleError(f"stages_per_device: a contiguous placement has one stage per device, got {V}")
        return list(range(S))
    if kind == "loop":
        return [s % R for s in range(S)]
    if kind == "v":
        out = []
        for s in range(S):
            lap, k = divmod(s, R)
            out.append(k if lap % 2 == 0 else R - 1 - k)
        return out
    raise ScheduleError(f"placement: expected one of {', '.join(PLACEMENTS)}, got {kind!r}")


def chunks_of(kind: str, stages: int, per_device: int = 1) -> list[list[int]]:
    """``out[r]`` = the stages of device r in increasing order (its chunks 0..V-1)."""
    devs = stage_devices(kind, stages, per_device)
    out: list[list[int]] = [[] for _ in range(stages // per_device)]
    for s, d in enumerate(devs):
        out[d].append(s)
    return out
