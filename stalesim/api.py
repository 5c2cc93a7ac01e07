"""The Python API: ``stalesim.profile``, ``simulate``, ``emulate`` and ``run``.

Thin, typed entry points over the functions the commands call (the profiler, the
simulator, the emulator and the executor's launcher), so a script or a notebook drives the
same code paths as ``stalesim profile|simulate|emulate|run``. A model or data set is named
as on the command line (a zoo name, or ``"pkg.module:factory"``) or given as the factory
function itself, which is named the same way (``module:qualname``): a factory defined in a
notebook works in-process (profile, simulate, emulate); the executor's ranks are other
processes and import it, so for :func:`run` it must live in a module file. See docs/api.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.threads import DEFAULT_THREADS

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig
    from stalesim.schedule import Schedule, ScheduleConfig
    from stalesim.sim.model import SimHardware
    from stalesim.sim.result import SimResult
    from stalesim.workloads.profile import Profile

ModelArg = str | Callable[[], Any]
DataArg = str | Callable[[], Any] | None


def spec_of(obj: str | Callable[[], Any] | None, flag: str) -> str | None:
    """A model/data set argument as the name the resolver reads: a string as it is, a
    factory function as ``module:qualname`` (it must be reachable by that name)."""
    if obj is None or isinstance(obj, str):
        return obj
    if not callable(obj):
        raise StalesimError(f"{flag}: expected a name (lenet5, pkg.module:factory) or a factory function, "
                            f"got {type(obj).__name__}")
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or "<" in qual:
        raise StalesimError(f"{flag}: {qual or obj!r} is not reachable by name (a lambda or a nested "
                            "function); define the factory at the top level of a module or notebook")
    return f"{module}:{qual}"


def _check_threads(threads: Any, *, optional: bool) -> int | None:
    """``threads`` as the CLI's ``--threads`` takes it (None: leave torch's setting, where allowed)."""
    from stalesim.limits import MAX_THREADS, check_int

    if threads is None and optional:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads: expected an integer in [1, {MAX_THREADS}]{' or None' if optional else ''}, "
                        f"got {type(threads).__name__}")
    return check_int("threads", threads, lo=1, hi=MAX_THREADS)


def _check_out(out: Any) -> str | None:
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out: expected a folder path (str or os.PathLike) or None, got {type(out).__name__}")
    return None if out is None else os.fspath(out)


def _check_cfg(cfg: Any) -> TrainConfig | None:
    from stalesim.runtime.config import TrainConfig

    if cfg is not None and not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg: expected a TrainConfig (stalesim.config(...)) or None, got {type(cfg).__name__}; "
                        "give a model by name as model=...")
    return cfg


def _profile_arg(profile: Any) -> Profile:
    """A Profile, or what ``stalesim simulate --profile`` reads: a profile JSON file, or its
    parsed object."""
    from stalesim.workloads.profile import Profile, load_profile

    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, (str, os.PathLike)):
        return load_profile(profile)
    if isinstance(profile, dict):
        try:
            return Profile.from_dict(profile)
        except StalesimError as exc:
            raise StalesimError(f"profile: {exc}") from None
    raise TypeError(f"profile: expected a Profile (stalesim.profile(...)), a profile JSON file or its dict, "
                    f"got {type(profile).__name__}")


def _hardware_arg(hardware: Any) -> Any:
    """None, a Hardware (a hardware JSON, a catalog device and link) or a SimHardware. A bare
    device name is refused rather than guessed: which link, and whether the profile's times
    are re-timed for that device, are choices ``stalesim simulate`` makes with flags."""
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import Hardware

    if hardware is None or isinstance(hardware, (Hardware, SimHardware)):
        return hardware
    hint = ""
    if isinstance(hardware, str):
        hint = (f" (for the catalog device {hardware!r}: stalesim.workloads.hardware.hardware_from_catalog"
                f"({hardware!r}, LINK); for a hardware JSON: load_hardware(path))")
    raise TypeError(f"hardware: expected a Hardware or SimHardware, got {type(hardware).__name__}{hint}")


def _fresh() -> None:
    """A notebook may redefine a factory under the same name: load data sets anew per call."""
    from stalesim.runtime.owndata import load_own_dataset

    load_own_dataset.cache_clear()


def profile(model: ModelArg, batch_sizes: int | Sequence[int], *, dataset: DataArg = None,
            device: str = "cpu", threads: int | None = 1, repeats: int = 5, warmup: int = 2,
            dtype: str = "float32", seed: int = 0) -> Profile:
    """Measure ``model``'s per-block forward/backward/update times at ``batch_sizes`` (what
    ``stalesim profile`` writes; ``Profile.to_json(path)`` stores it). ``dataset`` gives a
    user's model its input shape when the model does not state one.

    ``threads`` defaults to one torch thread, what each rank of :func:`run` uses, so the two
    time alike (None: leave torch's setting). When the blocks' summed time and the whole-model
    step differ by more than a factor of 2 (``sum_over_whole_ratio`` outside 0.5-2,
    :mod:`stalesim.workloads.blocksum`) it warns once, with the fix, as a
    :class:`~stalesim.workloads.profiler.BlockSumWarning`."""
    from stalesim.plugins import is_plugin
    from stalesim.workloads.profiler import profile_model

    _fresh()
    name = spec_of(model, "model")
    if name is None:
        raise TypeError("model: expected a name (lenet5, pkg.module:factory) or a factory function, got None")
    threads = _check_threads(threads, optional=True)
    for arg, value in (("device", device), ("dtype", dtype)):
        if not isinstance(value, str):
            raise TypeError(f"{arg}: expected a text such as {'cpu' if arg == 'device' else 'float32'}, "
                            f"got {type(value).__name__}")
    net: Any = name
    if is_plugin(name):
        from stalesim.runtime.build import own_model

        net = own_model(name, spec_of(dataset, "dataset"), seed=seed)
    return profile_model(net, batch_sizes, device=device, threads=threads, repeats=repeats, warmup=warmup,
                         dtype=dtype, seed=seed)


def load_schedule(path: str | os.PathLike[str], batches: int | None = None) -> Schedule:
    """A schedule file (our action-list JSON or torch's CSV), checked by the IR.

    ``batches``: the run's length; a torch CSV repeats its one step that many times (default
    1), a JSON file must hold exactly that many batches (None: as many as it holds)."""
    from stalesim.schedule.userfile import load_schedule_file

    return load_schedule_file(path, batches)


def simulate(profile: Profile, schedule: str | ScheduleConfig | Schedule | os.PathLike[str], *,
             hardware: SimHardware | None = None, ppv: Sequence[int] | None = None,
             batch_size: int | None = None, method: str = "event", **schedule_fields: Any) -> SimResult:
    """Predict iteration time, utilization, memory and staleness of ``schedule`` on
    ``hardware`` (default: the profile's device with an ideal link).

    ``schedule``: a registered name with its shape as keywords (``"1f1b", stages=4,
    microbatches=8``), a ScheduleConfig, a built Schedule, or a schedule file (``.json``/
    ``.csv``, :func:`load_schedule`)."""
    from stalesim.schedule import Schedule, ScheduleConfig
    from stalesim.sim import SimOptions
    from stalesim.sim import simulate as _simulate

    sched: Any = schedule
    if ppv is not None and (isinstance(ppv, (str, bytes)) or not isinstance(ppv, Sequence)):
        raise TypeError(f"ppv: expected a sequence of layer indices such as [3, 7], got {type(ppv).__name__}")
    if not isinstance(method, str):
        raise TypeError(f"method: expected a text such as 'event', got {type(method).__name__}")
    if isinstance(schedule, os.PathLike) or (isinstance(schedule, str) and
                                             schedule.lower().endswith((".json", ".csv"))):
        sched = load_schedule(schedule, schedule_fields.pop("batches", None))
    elif isinstance(schedule, str):
        if ppv is not None and "stages" not in schedule_fields:
            schedule_fields["stages"] = len(ppv) + 1
        sched = ScheduleConfig(schedule, **schedule_fields)
    elif not isinstance(schedule, (ScheduleConfig, Schedule)):
        raise StalesimError(f"schedule: expected a name, a ScheduleConfig, a Schedule or a file, "
                            f"got {type(schedule).__name__}")
    if schedule_fields and not isinstance(schedule, str):
        raise StalesimError(f"{next(iter(schedule_fields))}: schedule keywords go with a schedule name")
    opts = SimOptions(ppv=None if ppv is None else tuple(ppv), batch_size=batch_size, method=method)
    return _simulate(_profile_arg(profile), sched, _hardware_arg(hardware), opts)


def config(model: ModelArg = "lenet5", dataset: DataArg = None, **fields: Any) -> TrainConfig:
    """A checked :class:`~stalesim.runtime.config.TrainConfig` (the fields are the training
    flags of ``stalesim emulate``/``run``: schedule, stages, iterations, batch_size, lr, ...).
    ``dataset`` defaults to the zoo model's, or synthetic data for a user's model."""
    from stalesim.plugins import is_plugin
    from stalesim.runtime.config import TrainConfig

    name = spec_of(model, "model")
    assert name is not None
    data = spec_of(dataset, "dataset")
    if fields.get("schedule_file") is not None:  # the file fixes the schedule's name and shape
        from stalesim.schedule.userfile import fill_from_file

        fields["schedule_file"] = os.path.abspath(fields["schedule_file"])  # the ranks read it too
        fields = fill_from_file(fields["schedule_file"], fields)
    if data is None:
        if is_plugin(name):
            data = "synthetic"
        else:
            from stalesim.workloads.zoo_facts import model_facts

            facts = model_facts(name)
            data = facts.default_dataset if facts is not None else "synthetic"
    return TrainConfig(model=name, dataset=data, **fields).check()


def emulate(cfg: TrainConfig | None = None, *, out: str | os.PathLike[str] | None = None,
            progress: bool = False, threads: int | None = DEFAULT_THREADS, **fields: Any) -> dict[str, Any]:
    """Train on this process with exactly the schedule's weight staleness (``stalesim
    emulate``); returns the summary (``losses``, ``final_test_accuracy``, ``staleness``, ...).
    Give a config, or its fields as keywords (see :func:`config`). ``threads``: torch CPU
    threads while it trains (default 1, as ``stalesim emulate`` and every rank of
    :func:`run`: the sums' order, so the losses, depend on it; None: leave torch's setting)."""
    import torch

    from stalesim.emulator.replay import emulate as _emulate

    cfg = _check_cfg(cfg)
    threads = _check_threads(threads, optional=True)
    out = _check_out(out)
    _fresh()
    if cfg is not None and fields:
        raise StalesimError(f"{next(iter(fields))}: give a config or its fields, not both")
    run_cfg = cfg.check() if cfg is not None else config(**fields)
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _emulate(run_cfg, out=out, progress=progress)
    finally:
        torch.set_num_threads(old)


def run(cfg: TrainConfig | None = None, *, devices: str = "cpu:2", out: str | os.PathLike[str] | None = None,
        threads: int = DEFAULT_THREADS, timeout_s: float = 60.0, **fields: Any) -> dict[str, Any]:
    """Train for real on ``devices`` (``cpu:N`` gloo ranks or ``cuda:0,1,...``), one process
    per device of the schedule (``stalesim run``); returns the measured summary. A user's
    model and data set must be importable by name from the ranks (a module file)."""
    from stalesim.devices import parse_devices
    from stalesim.executor.launch import run_local
    from stalesim.executor.spec import expected_devices, job_schedule, make_job
    from stalesim.limits import MAX_SECONDS, MIN_RANK_TIMEOUT_S, check_number

    cfg = _check_cfg(cfg)
    n_threads = int(_check_threads(threads, optional=False) or DEFAULT_THREADS)  # never None here
    out = _check_out(out)
    if not isinstance(devices, str):
        raise TypeError(f"devices: expected a text such as 'cpu:2' or 'cuda:0,1', got {type(devices).__name__}")
    devs = parse_devices(devices)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s: expected a number of seconds, got {type(timeout_s).__name__}")
    timeout = check_number("timeout_s", timeout_s, lo=MIN_RANK_TIMEOUT_S, hi=MAX_SECONDS)
    _fresh()
    if cfg is not None and fields:
        raise StalesimError(f"{next(iter(fields))}: give a config or its fields, not both")
    run_cfg = cfg if cfg is not None else config(**fields)
    from stalesim.runtime.build import check_own_code

    run_cfg.check_runnable()
    check_own_code(run_cfg)
    sched = job_schedule(run_cfg)
    need = expected_devices(run_cfg, sched)
    if devs.count != need:  # as `stalesim run` checks, before any rank starts
        raise StalesimError(f"devices: {devices} gives {devs.count} rank(s) but schedule {run_cfg.schedule!r} "
                            f"needs {need}")
    job = make_job(run_cfg, out=out, schedule=sched)
    return run_local(job, devices, timeout_s=timeout, threads=n_threads)  # type: ignore[no-any-return]
