"""A validation's finished rounds on disk, so ``validate --resume`` continues a run that was
killed or failed instead of measuring everything again.

Why: a validation measures for 15-30 minutes (five interleaved rounds of every schedule, the
stage timing between them), then simulates and compares in seconds. A failure in that last
minute (a bug, a bad measured value), or a kill, used to lose every measurement. After each
round this module writes one file, ``checkpoint/round-<k>.pkl``, atomically: that round's
runs (with their per-action rows) and its 1-rank baseline, and the stage timer as it stands
after the round's pass. ``--resume`` reads the profile, the contended profile and the
calibration the first attempt wrote beside them (``profile.json``, ``profile_contended.json``,
``hardware.json``), restores the rounds, runs only the rounds still missing, and then
predicts and compares with the code as it is now: a fixed bug re-predicts the same
measurements.

Why pickle: the rows and the timer's samples are plain Python objects (dicts, dataclasses);
a round file is this command's own, read back only by a later ``--resume`` of the same
configuration (checked field by field), never shared as data. The measured results are
``summary.json`` and the run folders, as before.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError

FOLDER = "checkpoint"
# a round file's layout; a file of another format is refused, not misread
FORMAT = 1
# configuration fields that do not change what a round measured: where it is written, how the
# command was spelled, whether it resumes, the ranks' deadline and the emulation run after the rounds
NOT_MEASURED = ("out", "command", "resume", "timeout_s", "emulate_iterations")


@dataclass
class Resumed:
    """What the finished rounds measured (:func:`load`)."""

    rounds: int  # rounds 0 .. rounds - 1 are done
    overhead_s: dict[str, float]  # the profile step's per-action overhead
    base_runs: list[dict[str, Any]] = field(default_factory=list)  # the 1-rank baseline, one per round
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per schedule, one per round
    timer: Any = None  # the stage timer after the last finished round's pass (None: none was timed)


def round_path(out: Path, k: int) -> Path:
    return Path(out) / FOLDER / f"round-{k}.pkl"


def measured_fields(cfg: Any) -> dict[str, Any]:
    """The configuration a round's measurements depend on (``cfg``: a ValidateConfig)."""
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_MEASURED}


def save_round(out: Path, cfg: Any, k: int, *, overhead_s: dict[str, float], base_run: dict[str, Any],
               runs: dict[str, dict[str, Any]], timer: Any) -> Path:
    """Write round ``k`` (``runs``: its result per schedule) atomically; a kill while writing
    leaves the previous rounds' files and no partial one."""
    from stalesim.atomic import ensure_dir, write_bytes_atomic

    ensure_dir(Path(out) / FOLDER)
    doc = {"format": FORMAT, "config": measured_fields(cfg), "round": k, "overhead_s": dict(overhead_s),
           "base_run": base_run, "runs": runs, "timer": timer}
    return write_bytes_atomic(round_path(out, k), pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL))


def clear(out: Path) -> None:
    """Remove the round files of an earlier validation in ``out`` (a new one starts): a later
    ``--resume`` must not mix its rounds with another configuration's."""
    folder = Path(out) / FOLDER
    if folder.is_dir():
        for path in folder.glob("round-*.pkl"):
            path.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = pickle.loads(path.read_bytes())
    except OSError as exc:
        raise StalesimError(f"--resume: cannot read {path} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: one line, not a traceback
        raise StalesimError(f"--resume: {path} is not a validate round file ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StalesimError(f"--resume: {path} is not a validate round file of format {FORMAT}")
    return doc


def _check_config(path: Path, got: dict[str, Any], want: dict[str, Any]) -> None:
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            raise StalesimError(f"--resume: {path} was measured with {key} = {got.get(key)!r}, this command "
                                f"has {want.get(key)!r} (resume with the same options, or use a new --out)")


def load(out: Path, cfg: Any) -> Resumed:
    """The finished rounds in ``out`` (0, 1, ... up to the first missing one), checked against
    ``cfg``; a one-line error when there is none, or one was measured with other options."""
    want = measured_fields(cfg)
    docs: list[dict[str, Any]] = []
    while round_path(out, len(docs)).is_file():
        path = round_path(out, len(docs))
        doc = _read(path)
        _check_config(path, doc["config"], want)
        docs.append(doc)
    if not docs:
        raise StalesimError(f"--resume: no finished round in {Path(out) / FOLDER} (run without --resume)")
    runs: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        for name, res in doc["runs"].items():
            runs.setdefault(name, []).append(res)
    return Resumed(rounds=len(docs), overhead_s=docs[0]["overhead_s"], base_runs=[d["base_run"] for d in docs],
                   runs=runs, timer=docs[-1]["timer"])
