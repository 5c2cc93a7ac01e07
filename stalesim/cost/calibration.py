"""A machine's calibration: the cost terms measured once per machine, stored and reused.

``validate`` measures these terms on the ranks it runs and ``stalesim calibrate
--calibration`` on local ranks; both write the same file (:func:`write_calibration`), and
``simulate``, ``sweep`` and ``plan`` read it (``--calibration``) to predict this machine's
ranks with the same terms ``validate`` predicts with (:func:`stalesim.cost.apply.predict`).

The terms (:data:`TERMS`) are properties of the machine, the transport and the executor,
not of a model or a schedule. Contention between ranks and the stage times of each layout
are measured per model and stay ``validate``'s. Every term defaults to zero (no runtime
overhead, no gaps, free messages, cores enough for every rank): the profile and the link
alone, which is what a prediction for hardware one does not own gets, since a term
measured here does not carry over to another device.

File format (JSON, ``format_version`` 1): ``overhead_s`` (per compute kind, seconds added to
each action), ``dispatch_s`` (one gap per dispatched action, older files) or ``gaps_s``
(per kind, the loop's time after an action; ``comm`` after a send or receive), ``comm``
(:mod:`stalesim.validate.commcal`'s fits, or null), ``host_cores``, ``threads`` (the ranks'
threads when measured), ``device`` and ``source`` (what measured it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stalesim.errors import StalesimError
from stalesim.schedule.actions import COMPUTE_NAMES_ORDERED

FORMAT = "stalesim-machine-calibration"
FORMAT_VERSION = 1
#: the per-message fits :func:`stalesim.cost.terms.runtime_overheads` reads (the others,
#: ``arrive``, ``release`` and ``lost_*``, are optional: a term without them stays 0)
COMM_REQUIRED = ("post", "complete", "ar_post", "ar_complete")
COMM_OPTIONAL = ("arrive", "release", "lost_sender", "lost_receiver")
#: a gap or overhead longer than this is not an executor's per-action cost but a broken file
MAX_TERM_S = 10.0
MAX_HOST_CORES = 1 << 16


@dataclass
class MachineCalibration:
    """The calibrated cost terms of one machine (see the module doc)."""

    overhead_s: dict[str, float] = field(default_factory=dict)
    dispatch_s: float = 0.0
    gaps_s: dict[str, float] = field(default_factory=dict)
    comm: dict[str, Any] | None = None
    host_cores: int | None = None
    threads: int | None = None
    device: str = "cpu"
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "source": self.source,
                "device": self.device, "threads": self.threads, "host_cores": self.host_cores,
                "overhead_s": dict(self.overhead_s), "dispatch_s": self.dispatch_s,
                "gaps_s": dict(self.gaps_s), "comm": self.comm}

    def defaults(self) -> list[str]:
        """The names of the terms this calibration leaves at their defaults."""
        return [name for name, present in TERMS if not present(self)]


def _has_lost(c: MachineCalibration) -> bool:
    return c.comm is not None and any(k in c.comm for k in ("lost_sender", "lost_receiver"))


#: each term's name as the output shows it, and whether a calibration holds it
TERMS: tuple[tuple[str, Callable[[MachineCalibration], bool]], ...] = (
    ("per-action runtime overhead", lambda c: any(v > 0 for v in c.overhead_s.values())),
    ("executor gaps between actions", lambda c: bool(c.gaps_s) or c.dispatch_s > 0),
    ("per-message CPU cost", lambda c: c.comm is not None),
    ("compute a message takes", _has_lost),
    ("host cores", lambda c: c.host_cores is not None),
)


def default_terms(calibration: MachineCalibration | None) -> list[str]:
    """The names of the terms a prediction with ``calibration`` takes at their defaults."""
    return [n for n, _ in TERMS] if calibration is None else calibration.defaults()


def defaults_line(calibration: MachineCalibration | None, where: str = "--calibration") -> str:
    """One line saying which cost terms a prediction takes at their defaults (zero)."""
    names = default_terms(calibration)
    per_model = "contention between ranks is measured per model (validate), not applied"
    if not names:
        return f"cost terms: all calibrated ({where}); {per_model}"
    why = f"no {where}" if calibration is None else f"not in {where}"
    return f"cost terms at their defaults (0, {why}): {', '.join(names)}; {per_model}"


def write_calibration(path: str | os.PathLike[str], calibration: MachineCalibration) -> None:
    """Write ``calibration`` atomically (:mod:`stalesim.atomic`)."""
    from stalesim.atomic import write_json_atomic

    calibration_from_dict(calibration.to_dict())  # never write what cannot be read back
    write_json_atomic(path, calibration.to_dict())


def read_calibration(path: str | os.PathLike[str]) -> MachineCalibration:
    """The calibration at ``path``, checked (bounded read; a one-line error naming the field)."""
    from stalesim.workloads.jsondoc import read_json

    data = read_json(path, "calibration")
    try:
        return calibration_from_dict(data)
    except StalesimError as exc:
        raise StalesimError(f"calibration {os.fspath(path)!r}: {exc}") from None


def _seconds(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_TERM_S:
        raise StalesimError(f"{where}: expected seconds in [0, {MAX_TERM_S:g}], got {v!r}")
    return float(v)


def _per_kind(where: str, v: Any, kinds: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(v, dict):
        raise StalesimError(f"{where}: expected an object of seconds per action kind")
    bad = sorted(str(k) for k in v if k not in kinds)
    if bad:
        raise StalesimError(f"{where}.{bad[0]}: unknown kind (known: {', '.join(kinds)})")
    return {k: _seconds(f"{where}.{k}", x) for k, x in v.items()}


def _fit(where: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise StalesimError(f"{where}: expected an object with alpha_s and beta_s_per_byte")
    _seconds(f"{where}.alpha_s", v.get("alpha_s"))
    _seconds(f"{where}.beta_s_per_byte", v.get("beta_s_per_byte"))
    return v


def _comm(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise StalesimError("comm: expected an object of per-message fits, or null")
    for k in COMM_REQUIRED:
        if k not in v:
            raise StalesimError(f"comm.{k}: missing")
        _fit(f"comm.{k}", v[k])
    for k in ("arrive", "lost_sender", "lost_receiver"):
        if k in v:
            _fit(f"comm.{k}", v[k])
    if "release" in v:
        if not isinstance(v["release"], dict):
            raise StalesimError("comm.release: expected an object with alpha_s")
        _seconds("comm.release.alpha_s", v["release"].get("alpha_s", 0.0))
    return dict(v)


def _optional_int(where: str, v: Any, hi: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
        raise StalesimError(f"{where}: expected an integer in [1, {hi}] or null, got {v!r}")
    return v


def calibration_from_dict(data: Any) -> MachineCalibration:
    """A parsed calibration file, checked field by field."""
    from stalesim.limits import MAX_THREADS

    if not isinstance(data, dict):
        raise StalesimError(f"calibration: must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise StalesimError(f"format: expected {FORMAT!r}, got {data.get('format')!r} (not a calibration file)")
    if data.get("format_version") != FORMAT_VERSION:
        raise StalesimError(f"format_version: unsupported {data.get('format_version')!r} "
                            f"(this stalesim reads {FORMAT_VERSION})")
    kinds = tuple(COMPUTE_NAMES_ORDERED)
    for k in ("device", "source"):
        if not isinstance(data.get(k, ""), str):
            raise StalesimError(f"{k}: expected a string")
    return MachineCalibration(
        overhead_s=_per_kind("overhead_s", data.get("overhead_s", {}), kinds),
        dispatch_s=_seconds("dispatch_s", data.get("dispatch_s", 0.0)),
        gaps_s=_per_kind("gaps_s", data.get("gaps_s", {}), (*kinds, "comm")),
        comm=_comm(data.get("comm")),
        host_cores=_optional_int("host_cores", data.get("host_cores"), MAX_HOST_CORES),
        threads=_optional_int("threads", data.get("threads"), MAX_THREADS),
        device=str(data.get("device", "cpu")), source=str(data.get("source", "")))


def measure_calibration(comm_sizes: Sequence[int], *, threads: int = 1, repeats: int = 5,
                        timeout_s: float = 120.0) -> MachineCalibration:
    """The terms ``stalesim calibrate`` measures on 2 local CPU ranks, with validate's own
    functions: the per-action overhead (:func:`stalesim.validate.corunners.measure_overhead`),
    the per-message costs (:func:`stalesim.validate.commcal.measure_comm`) and the cores the
    ranks share. The gaps between actions need a run of a model, so only ``validate``
    measures them; here they stay at their default."""
    from stalesim.validate.commcal import measure_comm
    from stalesim.validate.cores import host_cores
    from stalesim.validate.corunners import measure_overhead

    overhead = measure_overhead(threads=threads, device="cpu")
    comm = measure_comm(list(comm_sizes), repeats=repeats * 5, devices="cpu:2",
                        timeout_s=timeout_s)
    return MachineCalibration(overhead_s=dict(overhead), comm=comm, host_cores=host_cores(),
                              threads=threads, device="cpu", source="calibrate")
