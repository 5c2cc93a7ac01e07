"""The plan's grid: which schedules fit the device count, with which mitigations,
optimizers and searched policies (synchronous warm-up length, hybrid switch point).

A :class:`Candidate` is one way to train on ``devices`` devices. Two of its configs
matter: the simulation's (:meth:`Candidate.schedule_config`: what runs on the target)
and the emulation's (:func:`emulation_config`: what decides convergence). They differ
on purpose for the synchronous schedules: a schedule without staleness and with one
loss computes the same gradients whatever its partition and order (the IR's
synchronous schedules reproduce ``gpipe``'s losses bitwise, docs/architecture.md), so
all of them share the one-device emulation with the same micro-batching, and the grid
emulates each distinct piece of arithmetic once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import ScheduleConfig, get_spec, schedule_names

# the one-device baseline every plan includes (constructed, never compared by name)
BASELINE = "sequential"
# the synchronous order a micro-batched emulation of a staleness-free schedule runs as
FLUSH = "gpipe"
# mitigation names -> TrainConfig fields: the study's table, so a plan and a study agree
MITIGATION_FIELDS = ("weight_prediction", "spike_compensation", "pipemare_lr", "pipemare_correction",
                     "staleness_lr", "nesterov_lookahead", "error_feedback", "basis_rotation")
# mitigations whose cost (state, update time) the plan's timing does not price: refused there
UNPRICED_MITIGATIONS = ("basis-rotation",)


@dataclass(frozen=True)
class Candidate:
    """One way to train on ``devices`` devices (see the module doc)."""

    schedule: str
    devices: int
    stages: int
    microbatches: int = 1
    workers: int = 1
    stages_per_device: int | None = None
    ppv: tuple[int, ...] | None = None
    mitigation: str = "none"
    optimizer: str = "sgd"
    warmup: int = 0
    switch: int | None = None

    @property
    def label(self) -> str:
        """Short, unique, readable: ``stale S=2 +weight-prediction warmup=20 adamw``."""
        parts = [self.schedule]
        spec = get_spec(self.schedule)
        if spec.data_parallel:
            parts.append(f"P={self.workers}")
        else:
            parts.append(f"S={self.stages}")
        if self.microbatches > 1:
            parts.append(f"M={self.microbatches}")
        if self.devices == 1:
            parts.append("(1 device)")
        if self.mitigation != "none":
            parts.append(f"+{self.mitigation}")
        if self.warmup:
            parts.append(f"warmup={self.warmup}")
        if self.switch is not None:
            parts.append(f"switch={self.switch}")
        parts.append(self.optimizer)
        return " ".join(parts)

    @property
    def synchronous(self) -> bool:
        """No staleness and one loss (the schedules the speed-up is measured against; ``local``
        has no staleness but trains each stage on its own loss, a different algorithm)."""
        return get_spec(self.schedule).placement_free

    def schedule_config(self, batches: int | None = None, *, warmup: int | None = None) -> ScheduleConfig:
        """The IR config the simulator runs on the target (``warmup`` overrides the policy)."""
        return ScheduleConfig(self.schedule, stages=self.stages, batches=batches,
                              microbatches=self.microbatches, workers=self.workers,
                              switch=self.switch, warmup=self.warmup if warmup is None else warmup,
                              stages_per_device=self.stages_per_device)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "schedule": self.schedule, "devices": self.devices,
                "stages": self.stages, "microbatches": self.microbatches, "workers": self.workers,
                "stages_per_device": self.stages_per_device,
                "ppv": None if self.ppv is None else list(self.ppv), "mitigation": self.mitigation,
                "optimizer": self.optimizer, "warmup": self.warmup, "switch": self.switch}


def mitigation_fields(name: str) -> dict[str, Any]:
    """TrainConfig fields of a mitigation name (the study's names: ``none``, ``pipemare``...):
    flags, and for the constant Nesterov look-ahead its momentum rule (a string)."""
    from stalesim.emulator.study import MITIGATIONS

    if name not in MITIGATIONS:
        raise StalesimError(f"mitigations: unknown {name!r} (known: {', '.join(MITIGATIONS)})")
    fields = MITIGATIONS[name]
    assert isinstance(fields, dict)  # the study's table is untyped: its values are field dicts
    return dict(fields)


def emulation_config(base: TrainConfig, cand: Candidate, *, seed: int, iterations: int | None = None,
                     epochs: int | None = None) -> TrainConfig:
    """The emulation that decides ``cand``'s convergence (checked; see the module doc).

    Synchronous single-loss schedules (not data-parallel: each worker's BatchNorm sees its
    own shard) collapse to the one-device run with the same micro-batching."""
    spec = get_spec(cand.schedule)
    # TrainConfig fields by name (bools; a mitigation may also set a string rule)
    flags: dict[str, Any] = {k: False for k in MITIGATION_FIELDS}
    if spec.placement_free and not spec.data_parallel:
        cfg = replace(base, schedule=FLUSH if cand.microbatches > 1 else BASELINE, stages=1, ppv=None,
                      microbatches=cand.microbatches, workers=1, fold=None, warmup=0, switch=None,
                      switch_epoch=None, stages_per_device=None, optimizer=cand.optimizer, seed=seed,
                      iterations=iterations, epochs=epochs, **flags)
    else:
        flags.update(mitigation_fields(cand.mitigation))
        cfg = replace(base, schedule=cand.schedule, stages=cand.stages,
                      ppv=None if cand.ppv is None else list(cand.ppv),
                      microbatches=cand.microbatches, workers=cand.workers, fold=None,
                      warmup=cand.warmup, switch=cand.switch, switch_epoch=None,
                      stages_per_device=cand.stages_per_device, optimizer=cand.optimizer, seed=seed,
                      iterations=iterations, epochs=epochs, **flags)
    return cfg.check()


def run_config(base: TrainConfig, cand: Candidate, *, seed: int, iterations: int) -> TrainConfig:
    """The candidate as it runs on real ranks (``stalesim run``, the executor): its own
    schedule, stages and partition, never the shared emulation of :func:`emulation_config`."""
    flags: dict[str, Any] = {k: False for k in MITIGATION_FIELDS}
    flags.update(mitigation_fields(cand.mitigation))
    return replace(base, schedule=cand.schedule, stages=cand.stages,
                   ppv=None if cand.ppv is None else list(cand.ppv), microbatches=cand.microbatches,
                   workers=cand.workers, fold=None, warmup=cand.warmup, switch=cand.switch, switch_epoch=None,
                   stages_per_device=cand.stages_per_device, optimizer=cand.optimizer, seed=seed,
                   iterations=iterations, epochs=None, **flags).check()


@dataclass(frozen=True)
class GridRequest:
    """What the user asked for (None: the defaults of :func:`grid`)."""

    devices: int
    schedules: list[str] | None = None
    mitigations: tuple[str, ...] = ("none",)
    optimizers: tuple[str, ...] = ("sgd",)
    microbatches: int = 0  # 0: 2 x devices (enough to fill a pipeline of that depth)
    warmups: tuple[int, ...] = (0,)
    switches: tuple[int, ...] = ()


def _shape(name: str, devices: int, blocks: int, micro: int) -> ScheduleConfig:
    """The IR shape of ``name`` on ``devices`` devices; StalesimError says why it cannot."""
    spec = get_spec(name)
    if spec.data_parallel:
        return spec.config(stages=1, workers=devices)
    stages = devices * spec.stages_per_device
    if stages > blocks:
        raise StalesimError(f"needs {stages} stages ({spec.stages_per_device} per device), "
                            f"the model has {blocks} blocks")
    cfg = spec.config(stages=stages, microbatches=micro)
    if spec.devices(cfg) != devices:
        raise StalesimError(f"runs on {spec.devices(cfg)} devices, not {devices}")
    return cfg


def grid(req: GridRequest, base: TrainConfig, blocks: int,
         ppv_of: Any = None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """(candidates, skipped as (what, why)). The one-device baseline comes first.

    ``ppv_of(stages)``: the partition for a stage count (the emulator's default, so the
    simulation times the partition whose convergence was emulated); None leaves it to
    each consumer. Every candidate's emulation config is checked here, so one that cannot
    run (micro-batches not dividing the batch, a mitigation the optimizer does not take)
    is skipped with its reason instead of failing after other emulations ran."""
    names = req.schedules if req.schedules is not None else schedule_names()
    for n in names:
        get_spec(n)  # an unknown name is an error, not a skip
    micro = req.microbatches or 2 * req.devices
    out: list[Candidate] = []
    skipped: list[tuple[str, str]] = []
    seen: set[Candidate] = set()

    def add(c: Candidate) -> None:
        if c in seen:
            return
        try:
            emulation_config(base, c, seed=0, iterations=max(1, c.warmup, c.switch or 0) + 1)
        except StalesimError as exc:
            skipped.append((c.label, str(exc)))
            return
        seen.add(c)
        out.append(c)

    for opt in req.optimizers:
        add(Candidate(BASELINE, devices=1, stages=1, optimizer=opt))
    for name in names:
        spec = get_spec(name)
        try:
            shape = _shape(name, req.devices, blocks, micro)
        except StalesimError as exc:
            skipped.append((f"{name} on {req.devices} devices", str(exc)))
            continue
        ppv = tuple(ppv_of(shape.stages)) if ppv_of is not None and shape.stages > 1 else None
        core = Candidate(name, devices=req.devices, stages=shape.stages, microbatches=shape.microbatches,
                         workers=shape.workers, stages_per_device=shape.stages_per_device, ppv=ppv)
        mits = ("none",) if spec.staleness_free else req.mitigations
        policies: list[dict[str, Any]]  # Candidate fields: the searched warm-up or switch
        if spec.switches:
            policies = [{"switch": k} for k in req.switches if k > 0]
            if not policies:  # the default switch is half of the run: not a policy of its own
                skipped.append((core.label, "no switch point to search (--switches)"))
                continue
        elif spec.warmup_with is not None:
            policies = [{"warmup": k} for k in req.warmups]
        else:
            policies = [{}]
        for opt in req.optimizers:
            for mit in mits:
                for pol in policies:
                    add(replace(core, optimizer=opt, mitigation=mit, **pol))
    return out, skipped
