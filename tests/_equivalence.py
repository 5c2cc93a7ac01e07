"""Shared by the executor == emulator tests: the emulator's reference run and the checks every
job's result must pass against it (losses, staleness, versions used)."""

from __future__ import annotations

import torch

from stalesim.emulator.replay import Emulator
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import ScheduleConfig, get_spec


def micro_for(name: str, stages: int, want: int, batch_size: int = 24) -> int:
    """The fewest micro-batches >= ``want`` that the schedule accepts and that divide the batch."""
    spec = get_spec(name)
    if not spec.uses_micro:
        return 1
    m = max(want, spec.min_microbatches(stages))
    while batch_size % m or (spec.constraint is not None and spec.constraint(
            ScheduleConfig(name, stages=stages, microbatches=m,
                           stages_per_device=spec.stages_per_device)) is not None):
        m += 1
    return m


def emulate(cfg: TrainConfig) -> tuple[dict, dict]:
    """The emulator's summary and the weight versions each (worker, stage) used."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    emu = Emulator(cfg, progress=False)
    summary = emu.run()
    versions = {f"{w}:{s}": [list(x) for x in rt.versions_used] for (w, s), rt in emu.rts.items()}
    return summary, versions


def check_equal(cfg: TrainConfig, res: dict, what: str) -> dict:
    """An executor result ``res`` equals the emulation of ``cfg``: versions match the IR, the
    same staleness, losses (bitwise in float64, 1e-6 relative in float32) and versions used.
    Returns the emulator's summary for the caller's own checks."""
    emu, emu_versions = emulate(cfg)
    assert res["versions_match_ir"] and emu["versions_match_ir"], what
    assert res["staleness_measured"] == res["staleness_ir"] == emu["staleness_ir"] == emu["staleness_measured"], what
    got, want = res["losses"], emu["losses"]
    assert len(got) == len(want) == cfg.iterations, what
    tol = 0.0 if cfg.dtype == "float64" else 1e-6
    for t, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= tol * abs(b), f"{what}: step {t}: executor {a!r} emulator {b!r}"
    ran = {k: [list(x) for x in v] for k, v in res["versions_used"].items()}
    assert ran == emu_versions, what
    return emu
