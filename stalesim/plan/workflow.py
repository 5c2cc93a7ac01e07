"""One plan, start to end: grid -> emulations (stored) -> simulations -> composition ->
outputs. The command line builds a :class:`PlanRequest` (the profile and hardware already
resolved, as ``simulate`` resolves them) and calls :func:`make_plan`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from stalesim.cost.calibration import default_terms
from stalesim.errors import StalesimError
from stalesim.launch import LaunchSpec
from stalesim.plan.candidates import Candidate, GridRequest, emulation_config, grid
from stalesim.plan.compose import Row, compose, feasibility
from stalesim.plan.confirm import changed, confirm
from stalesim.plan.continuation import continuable, last_horizon
from stalesim.plan.convergence import CANNOT_WIN, Convergence, EmulationStore, Target, converge
from stalesim.plan.early_stop import best_upper_s, cannot_win
from stalesim.plan.timing import Timing, time_candidate
from stalesim.progress import heartbeat
from stalesim.runtime.config import TrainConfig


@dataclass
class PlanRequest:
    """Everything a plan needs (the CLI fills it from its flags)."""

    base: TrainConfig  # model, data, batch, lr, ... (schedule fields are the grid's)
    grid: GridRequest
    target: Target
    seeds: list[int]
    horizon: int  # first horizon, in the target's unit (iterations or epochs)
    max_horizon: int
    profile: Any  # the costs the simulator reads (already for the target: roofline or measured)
    hardware: Any  # SimHardware
    hardware_name: str
    out: Path
    time_error: float = 0.10
    capacity_bytes: float | None = None
    jobs: int = 1
    batched: bool = False
    progress: bool | None = None
    sim_options: dict[str, Any] = field(default_factory=dict)
    figure: bool = True
    # where the emulations run (stalesim.launch: this machine's processes by default) and
    # their TensorBoard scalars; the emulations and what resume keeps are the same wherever
    launcher: LaunchSpec | None = None
    tensorboard: Path | None = None
    calibration: Any = None  # the machine's MachineCalibration (None: every term at its default)


@dataclass
class Plan:
    """A finished plan: its ranked rows, the header of its outputs, the candidates skipped
    with the reason, the store of its emulations and the files it wrote."""

    rows: list[Row]
    header: dict[str, Any]
    skipped: list[tuple[str, str]]
    store: EmulationStore
    paths: list[Path]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _emulate(req: PlanRequest, todo: list[tuple[str, TrainConfig]], folder: Path) -> list[dict]:
    """The emulations of ``todo`` as one study in ``folder`` (batched when asked and possible),
    placed by the plan's launcher."""
    from stalesim.emulator.study import run_study  # looked up at call time: tests stand in for it

    place = partial(run_study, jobs=req.jobs, progress=req.progress, launcher=req.launcher,
                    tensorboard=req.tensorboard)
    if req.batched:
        try:
            return place(todo, folder, batched=True)
        except StalesimError as exc:  # e.g. BatchNorm: running statistics cannot be stacked
            _log(f"plan: batched emulation refused ({exc}); running the runs one by one")
    return place(todo, folder)


def _continue(req: PlanRequest, todo: list[tuple[str, TrainConfig]], folder: Path) -> list[dict]:
    """The emulations of ``todo`` continued from their shorter horizon's run
    (:mod:`stalesim.plan.continuation`), placed by the plan's launcher."""
    from stalesim.plan.continuation import run_continued  # looked up at call time: tests stand in for it

    return run_continued(todo, folder, first=req.horizon, last=last_horizon(req.horizon, req.max_horizon),
                         jobs=req.jobs, progress=req.progress, launcher=req.launcher, tensorboard=req.tensorboard)


def make_plan(req: PlanRequest) -> Plan:
    """Run the plan (see the module doc); writes plan.json, plan.csv, pareto.png in ``out``."""
    from stalesim.plan.report import write_outputs
    from stalesim.runtime.build import model_of
    from stalesim.workloads.partition import default_ppv

    if not req.seeds:
        raise StalesimError("seeds: give at least one seed")
    # a zoo model or the user's own (pkg.module:factory, checked by the command before)
    model = model_of(req.base.model, req.base.dataset, seed=0, num_classes=req.base.num_classes)
    ppvs: dict[int, list[int]] = {}

    def ppv_of(stages: int) -> list[int]:
        if stages not in ppvs:
            ppvs[stages] = default_ppv(model, stages)
        return ppvs[stages]

    cands, skipped = grid(req.grid, req.base, len(model.block_names), ppv_of)
    if not cands:
        raise StalesimError("schedules: no candidate fits " + "; ".join(f"{a}: {b}" for a, b in skipped[:3]))
    _log(f"plan: {len(cands)} candidate(s) x {len(req.seeds)} seed(s); {len(skipped)} skipped")
    # batched float32 runs are not the single runs (stalesim.plan.confirm) but share their
    # configs and keys: they are kept in a store of their own, so a plan without --batched
    # never reads them, and the single runs that confirm them are the plain store's
    home = req.out / "batched" if req.batched else req.out
    store = EmulationStore(home)
    unit_epochs = req.target.kind == "accuracy"

    def configs(c: Candidate, h: int) -> list[TrainConfig]:
        length = {"epochs": h} if unit_epochs else {"iterations": h}
        return [emulation_config(req.base, c, seed=s, **length) for s in req.seeds]

    def run(todo: list[tuple[str, TrainConfig]]) -> list[dict]:
        folder = home / "emulations" / "study"
        # a longer horizon continues the shorter run where that is exact, else reruns it
        cont = [(rid, cfg) for rid, cfg in todo if continuable(cfg, batched=req.batched)[0]]
        ids = {rid for rid, _ in cont}
        rest = [(rid, cfg) for rid, cfg in todo if rid not in ids]
        with _heartbeat(folder / "results.jsonl", {rid for rid, _ in todo}, enabled=req.progress is not False):
            return (_continue(req, cont, folder) if cont else []) + (_emulate(req, rest, folder) if rest else [])

    # simulated first (under a second): the early-stop rule needs each candidate's time
    timings: dict[Candidate, Timing | None] = {}
    errors: dict[Candidate, str] = {}
    t1 = time.perf_counter()
    for c in cands:
        try:
            timings[c] = time_candidate(c, req.profile, req.hardware, batch_size=req.base.batch_size,
                                        extra_options=req.sim_options, calibration=req.calibration)
        except StalesimError as exc:
            timings[c], errors[c] = None, f"simulation: {exc}"
    t_sim = time.perf_counter() - t1
    feasible = [c for c in cands if c not in errors and feasibility(timings[c], req.capacity_bytes)[0]]

    def stop(so_far: dict[Candidate, Convergence], batched: bool = req.batched) -> dict[Candidate, str]:
        best = best_upper_s(so_far, timings, feasible, req.time_error, smooth=req.target.smooth, batched=batched)
        return {c: cannot_win(v, timings.get(c), best, req.time_error) for c, v in so_far.items()}

    bpe = _batches_per_epoch(req.base) if unit_epochs else 1
    t0 = time.perf_counter()
    convs: dict[Candidate, Convergence] = converge(
        cands, configs, store, run, req.target, req.horizon, req.max_horizon,
        max_iterations=lambda h: h * bpe, log=_log, stop=stop)
    confirmed = EmulationStore(req.out)  # single runs confirming batched crossings
    if req.batched:
        convs = _confirm_single(req, convs, configs, confirmed)
        convs = _recheck_stopped(convs, stop(convs, False))
    t_emu = time.perf_counter() - t0
    _log(f"plan: emulations done ({store.ran} run, {store.reused} reused, "
         f"{store.iterations_run + confirmed.iterations_run} iterations emulated, {t_emu:.1f} s)")
    rows = compose(cands, convs, timings, time_error=req.time_error, capacity_bytes=req.capacity_bytes,
                   errors=errors)
    header = _header(req, cands, convs, skipped, runs=(store, confirmed), seconds=(t_emu, t_sim))
    paths = write_outputs(req.out, rows, header, figure=req.figure)
    return Plan(rows, header, skipped, store, paths)


def _header(req: PlanRequest, cands: list[Candidate], convs: dict[Candidate, Convergence],
            skipped: list[tuple[str, str]], *, runs: tuple[EmulationStore, EmulationStore],
            seconds: tuple[float, float]) -> dict[str, Any]:
    """plan.json's header: the request, the work the plan did (``runs``: the emulation store
    and the single confirmations' store; ``seconds``: emulation and simulation wall time) and
    every candidate's convergence."""
    store, confirmed = runs
    t_emu, t_sim = seconds
    cap = req.capacity_bytes
    header = {
        "model": req.base.model, "dataset": req.base.dataset, "batch_size": req.base.batch_size,
        "lr": req.base.lr, "target": req.target.describe(), "target_kind": req.target.kind,
        "target_value": req.target.value, "devices": req.grid.devices, "hardware": req.hardware_name,
        "cost_terms_at_default": default_terms(req.calibration),
        "capacity_bytes": cap, "capacity": "unknown" if cap is None else f"{cap / 2**30:.3g} GiB",
        "time_error": req.time_error, "seeds": list(req.seeds), "horizon": req.horizon,
        "max_horizon": req.max_horizon, "horizon_unit": req.target.unit,
        "profile_device": getattr(req.profile, "device", None),
        "emulations_run": store.ran, "emulations_reused": store.reused,
        "single_confirmations_run": confirmed.ran, "single_confirmations_reused": confirmed.reused,
        "emulated_iterations": store.iterations_run + confirmed.iterations_run,
        "cannot_win": sum(1 for c in cands if convs[c].status == CANNOT_WIN),
        "emulation_s": round(t_emu, 2), "simulation_s": round(t_sim, 2),
        "searched": {"mitigations": list(req.grid.mitigations), "optimizers": list(req.grid.optimizers),
                     "warmups": list(req.grid.warmups), "switches": list(req.grid.switches)},
        "skipped": [{"candidate": a, "reason": b} for a, b in skipped],
        "convergence": {c.label: convs[c].to_dict() for c in cands},
    }
    return header


def _confirm_single(req: PlanRequest, convs: dict[Candidate, Convergence],
                    configs: Callable[[Candidate, int], list[TrainConfig]],
                    store: EmulationStore) -> dict[Candidate, Convergence]:
    """The reached candidates' crossings from single emulations (:mod:`stalesim.plan.confirm`:
    batched float32 runs drift from the single runs the executor reproduces), run and kept
    as a plan without --batched runs and keeps them, so either plan reuses the other's."""
    from stalesim.emulator.study import run_study

    def run(todo: list[tuple[str, TrainConfig]]) -> list[dict]:
        return run_study(todo, req.out / "emulations" / "study", jobs=req.jobs, progress=req.progress,
                         launcher=req.launcher, tensorboard=req.tensorboard)

    n = sum(len(v.per_seed) for v in convs.values() if v.reached)
    _log(f"plan: confirming {n} batched crossing(s) with single emulations")
    out = confirm(convs, configs, store, run, req.target)
    moved = sum(changed(convs[c].per_seed, out[c].per_seed) for c in convs)
    _log(f"plan: single emulations moved {moved} of {n} crossing(s)")
    return out


def _recheck_stopped(convs: dict[Candidate, Convergence], why: dict[Candidate, str]
                     ) -> dict[Candidate, Convergence]:
    """The early stops of a batched search checked again on the confirmed crossings: one the
    rule no longer makes is not a ``cannot win`` (its iterations stay unknown, as it stopped)."""
    out = dict(convs)
    for c, v in convs.items():
        if v.status == CANNOT_WIN and not why.get(c):
            out[c] = Convergence(v.per_seed, v.horizon, "not reached", None,
                                 v.note + "; the single runs moved the crossings it was compared with, and "
                                 "the rule no longer excludes it (plan without --batched to settle it)",
                                 v.emulation_s, v.runs)
    return out


def _heartbeat(log: Path, ids: set[str], *, enabled: bool, every_s: float = 15.0) -> Any:
    """A line every ``every_s`` seconds while emulations run and stderr is not a terminal
    (where the study's own bar shows): how many of the runs ``ids`` have finished (the
    study's results.jsonl has a line per finished run)."""
    def finished() -> str:
        try:
            text = log.read_text(encoding="utf-8")
        except OSError:
            text = ""
        done = sum(1 for rid in ids if f'"run_id": "{rid}"' in text)
        return f"{done}/{len(ids)} emulation(s) finished"

    return heartbeat("plan", enabled=enabled and not sys.stderr.isatty(), every_s=every_s, status=finished)


def _batches_per_epoch(cfg: TrainConfig) -> int:
    from stalesim.runtime.data import batch_stream

    return int(batch_stream(cfg).batches_per_epoch)
