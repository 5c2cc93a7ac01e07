"""What one ``validate`` run compares, checked before anything expensive starts.

A :class:`ValidateConfig` fixes everything the three consumers must share:
model, batch size, micro-batches, partition (PPV), iterations, the devices and
the torch thread count of each rank. Every schedule is then simulated, run and
emulated with exactly these numbers, so a difference between prediction and
measurement is a modelling error, never a configuration mismatch.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.limits import (
    MAX_COUNT,
    MAX_FACTOR,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    MIN_RANK_TIMEOUT_S,
    check_int,
    check_number,
)

DATASETS = ("synthetic", "mnist", "fashion-mnist", "cifar10")


@dataclass
class ValidateConfig:
    """One validation: ``schedules`` on ``devices`` (``cpu:N`` or ``cuda:0,1``).

    Pipeline schedules use S = number of devices stages (S = devices x V for the
    schedules with V virtual stages per device); data-parallel ones
    (dp, pipe-sgd) use P = number of devices workers with S = 1.
    """

    model: str = "lenet5"
    devices: str = "cpu:2"
    schedules: list[str] = field(default_factory=lambda: ["all"])
    iterations: int = 40
    batch_size: int = 64
    microbatches: int = 4
    threads: int = 1
    dataset: str = "synthetic"
    data_dir: str | None = None
    ppv: list[int] | None = None
    out: str = "runs/validate"
    emulate_iterations: int = 10
    seed: int = 0
    lr: float = 0.01
    # measured runs per schedule, interleaved round-robin (median + noise floor); see
    # docs/validate.md "Measurement protocol". Not the profile's repeats (profile_repeats).
    repeats: int = 3
    profile_repeats: int = 5  # timed rounds of the per-layer profile
    hardware: str | None = None  # reuse a calibration (HW.json) instead of measuring
    profile: str | None = None  # reuse a profile (same device and thread count) instead of measuring
    contended_profile: str | None = None  # and its contended twin
    calibrate_repeats: int = 3
    contention: bool = True  # profile again with the other ranks busy (CPU)
    overhead: bool = True  # measure the per-action runtime overhead
    timeout_s: float = 120.0
    command: str = ""
    # continue the validation in ``out`` from its finished rounds (:mod:`stalesim.validate.checkpoint`)
    resume: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def runnable_schedules(n_devices: int) -> list[str]:
    """Schedules that run on ``n_devices``: every pipeline with S = n, dp/pipe-sgd with P = n.

    On one device only ``sequential`` (S = 1) makes sense.
    """
    from stalesim.schedule import schedule_names

    if n_devices <= 1:
        return ["sequential"]
    return list(schedule_names())


def resolve_schedules(text: list[str] | str, n_devices: int) -> list[str]:
    """``all`` or a comma list -> known, runnable schedule names (order kept, no repeats)."""
    from stalesim.schedule import schedule_names

    items = text.split(",") if isinstance(text, str) else [p for s in text for p in s.split(",")]
    items = [s.strip() for s in items if s.strip()]
    if not items:
        raise StalesimError("--schedules: give at least one schedule name or 'all'")
    known = schedule_names()
    runnable = runnable_schedules(n_devices)
    out: list[str] = []
    for name in items:
        names = runnable if name == "all" else [name]
        for n in names:
            if n not in known:
                raise StalesimError(f"--schedules: unknown schedule {n!r} (known: {', '.join(known)}, all)")
            if n not in runnable:
                raise StalesimError(f"--schedules: {n!r} cannot run on {n_devices} device(s)")
            if n not in out:
                out.append(n)
    return out


def check_out_dir(path: str) -> Path:
    """Create ``path`` if needed and prove it is writable (one-line error otherwise)."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p, prefix=".write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise StalesimError(f"--out: {path!r} is not writable ({exc.strerror or exc})") from None
    return p


def _own_blocks(cfg: ValidateConfig) -> int | None:
    """The user's model and data set, built and checked now (:func:`stalesim.runtime.build.check_own_code`:
    a zoo model given the user's data set too, whose labels or input shape it cannot take), before
    anything is measured; the blocks of the user's model (None: a zoo model)."""
    from stalesim.plugins import is_plugin
    from stalesim.runtime.build import check_own_code, run_model
    from stalesim.runtime.config import TrainConfig

    tc = TrainConfig(model=cfg.model, dataset=cfg.dataset, iterations=1, batch_size=cfg.batch_size,
                     seed=cfg.seed)
    check_own_code(tc)
    return len(run_model(tc).block_names) if is_plugin(cfg.model) else None


def check_config(cfg: ValidateConfig) -> tuple[Any, list[str]]:
    """Validate every field cheaply (no torch); returns (parsed devices, schedules)."""
    from stalesim.devices import parse_devices
    from stalesim.workloads.zoo_facts import model_facts, model_names

    devs = parse_devices(cfg.devices)
    if devs.count < 1:
        raise StalesimError(f"--devices: need at least one device, got {cfg.devices!r}")
    from stalesim.plugins import is_plugin

    try:
        facts = model_facts(cfg.model)
    except StalesimError as exc:
        raise StalesimError(f"--model: {exc}") from None
    if facts is None and not is_plugin(cfg.model):
        raise StalesimError(f"--model: unknown {cfg.model!r} (known: {', '.join(model_names())}, or your "
                            "own as pkg.module:factory)")
    if cfg.dataset not in DATASETS and not is_plugin(cfg.dataset):
        raise StalesimError(f"--dataset: unknown {cfg.dataset!r} (known: {', '.join(DATASETS)}, or your "
                            "own as pkg.module:factory)")
    limits = {"iterations": MAX_COUNT, "batch_size": MAX_COUNT, "microbatches": MAX_COUNT,
              "threads": MAX_THREADS, "repeats": MAX_REPEATS, "profile_repeats": MAX_REPEATS,
              "calibrate_repeats": MAX_REPEATS}
    for name, hi in limits.items():
        check_int(f"--{name.replace('_', '-')}", getattr(cfg, name), lo=1, hi=hi)
    check_int("--emulate-iterations", cfg.emulate_iterations, lo=0)
    check_int("--seed", cfg.seed, hi=MAX_SEED)
    check_number("--timeout", cfg.timeout_s, lo=MIN_RANK_TIMEOUT_S, hi=MAX_SECONDS)
    check_number("lr", cfg.lr, hi=MAX_FACTOR, lo_open=True)
    own = _own_blocks(cfg) if facts is None or is_plugin(cfg.dataset) else None
    blocks = facts.blocks if facts is not None else (own or 0)  # the user's model: _own_blocks counted them
    if not blocks >= devs.count:
        raise StalesimError(f"--devices: {devs.count} pipeline stages but model {cfg.model!r} has only "
                            f"{blocks} blocks")
    if cfg.iterations < 4:
        raise StalesimError(f"--iterations: need at least 4 for a steady-state window, got {cfg.iterations}")
    scheds = resolve_schedules(cfg.schedules, devs.count)
    n = devs.count
    from stalesim.schedule import ScheduleConfig, get_spec, resolve

    for name in scheds:
        spec = get_spec(name)
        split = n if spec.data_parallel else (cfg.microbatches if spec.uses_micro else 1)
        if cfg.batch_size % split:
            raise StalesimError(f"--batch-size: {cfg.batch_size} is not divisible by {split} "
                                f"(schedule {name})")
        # the schedule's own constraints (e.g. 2bw's M >= S - 1) and its size, asked of the IR
        try:
            resolve(ScheduleConfig(name, stages=1 if spec.data_parallel else n * spec.stages_per_device,
                                   batches=cfg.iterations,
                                   microbatches=cfg.microbatches if spec.uses_micro else 1,
                                   workers=n if spec.data_parallel else 1))
        except StalesimError as exc:
            raise StalesimError(f"--{exc}") from None
    if cfg.ppv is not None and len(cfg.ppv) + 1 != n:
        raise StalesimError(f"--ppv: {len(cfg.ppv)} entries give {len(cfg.ppv) + 1} stages, "
                            f"but --devices has {n}")
    for flag in ("hardware", "profile", "contended_profile"):
        path = getattr(cfg, flag)
        if path is not None and not Path(path).is_file():
            raise StalesimError(f"--{flag.replace('_', '-')}: no such file {path!r}")
    # files to reuse are read and checked now, not after minutes of profiling
    if cfg.hardware is not None:
        read_hardware_json(cfg.hardware)
    if cfg.profile is not None:
        reused_profile(cfg.profile, cfg, "--profile")
    if cfg.contended_profile is not None:
        reused_profile(cfg.contended_profile, cfg, "--contended-profile")
    check_out_dir(cfg.out)
    return devs, scheds


def read_hardware_json(path: str) -> dict[str, Any]:
    """The parsed hardware JSON at ``path``, validated (one-line error naming the field)."""
    from stalesim.workloads.hardware import hardware_from_dict
    from stalesim.workloads.jsondoc import read_json

    data = read_json(path, "hardware")
    try:
        hardware_from_dict(data)
    except StalesimError as exc:
        raise StalesimError(f"hardware {path!r}: {exc}") from None
    return data


def reused_profile(path: str, cfg: ValidateConfig, flag: str) -> Any:
    """A profile given to reuse: valid, of ``cfg.model``, measured with the ranks' threads."""
    from stalesim.workloads.profile import load_profile

    try:
        prof = load_profile(path)
    except StalesimError as exc:
        raise StalesimError(f"{flag}: {exc}") from None
    if prof.model != cfg.model:
        raise StalesimError(f"{flag}: profile of {prof.model!r}, but --model is {cfg.model!r}")
    if prof.threads is not None and prof.device == "cpu" and prof.threads != cfg.threads:
        raise StalesimError(f"{flag}: measured with {prof.threads} thread(s), the ranks use {cfg.threads}")
    return prof
