"""A validation's finished rounds on disk, so ``validate --resume`` continues a run that was
killed or failed instead of measuring everything again.

Why: a validation measures for 15-30 minutes (five interleaved rounds of every schedule, the
stage timing between them), then simulates and compares in seconds. A failure in that last
minute (a bug, a bad measured value), or a kill, used to lose every measurement. After each
round this module writes one file, ``checkpoint/round-<k>.json``, atomically: that round's
runs (with their per-action rows) and its 1-rank baseline, and the stage timer's samples as
they stand after the round's pass. ``--resume`` reads the profile, the contended profile and
the calibration the first attempt wrote beside them (``profile.json``,
``profile_contended.json``, ``hardware.json``), restores the rounds, runs only the rounds
still missing, and then predicts and compares with the code as it is now: a fixed bug
re-predicts the same measurements.

Why JSON, not pickle: a results folder is shared (copied to a colleague, attached to a bug
report), and unpickling runs whatever the file says, so a crafted round file would run code
on ``--resume``. Everything a round holds is plain data (the runs' summaries were JSON
already, the timer's samples are lists and dicts of numbers: :meth:`LayoutTimer.state`),
so the file is JSON with a format number, read as a bounded regular file and checked field
by field (:func:`_check_doc`) before any of it is used; the stage layouts themselves are
rebuilt from the resuming command's own configuration. A round file of the earlier pickle
format is refused unread, saying how to measure again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stalesim.errors import StalesimError
from stalesim.inputs import MAX_DOCUMENT_BYTES, read_text

__all__ = ["FOLDER", "FORMAT", "Resumed", "check_timer_state", "clear", "load", "measured_fields", "round_path",
           "save_round"]

FOLDER = "checkpoint"
SUFFIX = ".json"
# the round files of earlier versions: pickles, never read (see the module doc)
OLD_SUFFIX = ".pkl"
# a round file's layout; a file of another format is refused, not misread (1: the pickle)
FORMAT = 2
# configuration fields that do not change what a round measured: where it is written, how the
# command was spelled, whether it resumes, the ranks' deadline and the emulation run after the rounds
NOT_MEASURED = ("out", "command", "resume", "timeout_s", "emulate_iterations")
# the fields of a run's per-action row (stalesim.executor.results): label, kind, stage, batch, micro,
# worker, start and end seconds
ROW_FIELDS = 8
# a round file's keys and the stage timer state's (:meth:`LayoutTimer.state`)
_DOC_KEYS = frozenset({"format", "config", "round", "overhead_s", "base_run", "runs", "timer"})
_TIMER_KEYS = frozenset({"layouts", "passes", "alone", "busy", "busy_wait", "alone_passes", "busy_passes",
                         "alone_ratios", "busy_ratios"})


@dataclass
class Resumed:
    """What the finished rounds measured (:func:`load`)."""

    rounds: int  # rounds 0 .. rounds - 1 are done
    overhead_s: dict[str, float]  # the profile step's per-action overhead
    base_runs: list[dict[str, Any]] = field(default_factory=list)  # the 1-rank baseline, one per round
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per schedule, one per round
    # the stage timer's samples after the last finished round's pass (:meth:`LayoutTimer.state`,
    # checked); None: nothing was timed
    timer: dict[str, Any] | None = None


def round_path(out: Path, k: int) -> Path:
    return Path(out) / FOLDER / f"round-{k}{SUFFIX}"


def measured_fields(cfg: Any) -> dict[str, Any]:
    """The configuration a round's measurements depend on (``cfg``: a ValidateConfig), as
    JSON gives it back (tuples are lists), so a written one compares equal to a fresh one."""
    fields = {k: v for k, v in cfg.to_dict().items() if k not in NOT_MEASURED}
    return dict(json.loads(json.dumps(fields)))


def save_round(out: Path, cfg: Any, k: int, *, overhead_s: dict[str, float], base_run: dict[str, Any],
               runs: dict[str, dict[str, Any]], timer: Any) -> Path:
    """Write round ``k`` (``runs``: its result per schedule; ``timer``: the stage timer, whose
    :meth:`state` is written) atomically; a kill while writing leaves the previous rounds'
    files and no partial one."""
    from stalesim.atomic import ensure_dir, write_text_atomic

    ensure_dir(Path(out) / FOLDER)
    doc = {"format": FORMAT, "config": measured_fields(cfg), "round": k, "overhead_s": dict(overhead_s),
           "base_run": base_run, "runs": runs, "timer": None if timer is None else timer.state()}
    return write_text_atomic(round_path(out, k), json.dumps(doc))


def clear(out: Path) -> None:
    """Remove the round files of an earlier validation in ``out`` (a new one starts): a later
    ``--resume`` must not mix its rounds with another configuration's. Old pickled ones go too."""
    folder = Path(out) / FOLDER
    if folder.is_dir():
        for suffix in (SUFFIX, OLD_SUFFIX):
            for path in folder.glob(f"round-*{suffix}"):
                path.unlink(missing_ok=True)


def load(out: Path, cfg: Any) -> Resumed:
    """The finished rounds in ``out`` (0, 1, ... up to the first missing one), checked against
    ``cfg``; a one-line error when there is none, one is malformed, or one was measured with
    other options."""
    _refuse_old(out)
    want = measured_fields(cfg)
    docs: list[dict[str, Any]] = []
    while round_path(out, len(docs)).is_file():
        path = round_path(out, len(docs))
        doc = _read(path)
        _check_doc(path, doc, len(docs))
        _check_config(path, doc["config"], want)
        docs.append(doc)
    if not docs:
        raise StalesimError(f"--resume: no finished round in {Path(out) / FOLDER} (run without --resume)")
    layouts = {None if d["timer"] is None else d["timer"]["layouts"] for d in docs}
    if len(layouts) > 1:
        raise StalesimError(f"--resume: the rounds in {Path(out) / FOLDER} timed different stage layouts")
    runs: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        for name, res in doc["runs"].items():
            runs.setdefault(name, []).append(res)
    return Resumed(rounds=len(docs), overhead_s=docs[0]["overhead_s"], base_runs=[d["base_run"] for d in docs],
                   runs=runs, timer=docs[-1]["timer"])


def _refuse_old(out: Path) -> None:
    """An earlier version's pickled round file: refused without reading a byte of it."""
    folder = Path(out) / FOLDER
    old = sorted(folder.glob(f"round-*{OLD_SUFFIX}")) if folder.is_dir() else []
    if old:
        raise StalesimError(f"--resume: {old[0]} is a round file of an earlier stalesim (pickle, not read); "
                            f"measure again: run without --resume, or delete {folder}")


def _read(path: Path) -> dict[str, Any]:
    text = read_text(path, "--resume: round file", MAX_DOCUMENT_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StalesimError(f"--resume: {path} is not a validate round file (not JSON: {exc.msg}, "
                            f"line {exc.lineno})") from None
    except (RecursionError, ValueError) as exc:  # nested too deeply; a number of thousands of digits
        raise StalesimError(f"--resume: {path} is not a validate round file ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StalesimError(f"--resume: {path} is not a validate round file of format {FORMAT}")
    return doc


def _bad(path: Path, what: str) -> StalesimError:
    return StalesimError(f"--resume: {path} is not a valid validate round file ({what})")


def _check_doc(path: Path, doc: dict[str, Any], k: int) -> None:
    """Every field a resume uses, of the type it is used as (a crafted or damaged file is one
    line here, not a KeyError or a comparison of a text with a number later)."""
    missing = sorted(_DOC_KEYS - set(doc))
    if missing:
        raise _bad(path, f"no {missing[0]!r}")
    if doc["round"] != k or isinstance(doc["round"], bool):
        raise _bad(path, f"'round' must be {k}")
    if not isinstance(doc["config"], dict):
        raise _bad(path, "'config' must be an object")
    if not _is_map(doc["overhead_s"], _is_number):
        raise _bad(path, "'overhead_s' must map action kinds to seconds")
    if not _is_run(doc["base_run"]):
        raise _bad(path, "'base_run' must be a run's result")
    runs = doc["runs"]
    if not isinstance(runs, dict) or not all(isinstance(n, str) and _is_run(r) for n, r in runs.items()):
        raise _bad(path, "'runs' must map schedule names to runs' results")
    if doc["timer"] is not None:
        problem = check_timer_state(doc["timer"])
        if problem:
            raise _bad(path, f"'timer': {problem}")


def check_timer_state(state: Any) -> str | None:
    """What is wrong with a stage timer state read back (:meth:`LayoutTimer.state`), or None."""
    if not isinstance(state, dict) or set(state) != _TIMER_KEYS:
        return f"expected an object with {', '.join(sorted(_TIMER_KEYS))}"
    n, passes = state["layouts"], state["passes"]
    if not (_is_count(n) and _is_count(passes)):
        return "'layouts' and 'passes' must be counts"
    per_layout = {"alone": lambda x: x is None or _is_samples(x), "busy": lambda x: x is None or _is_samples(x),
                  "busy_wait": _is_wait_samples, "alone_passes": _is_pass_means, "busy_passes": _is_pass_means,
                  "alone_ratios": _is_ratios, "busy_ratios": _is_ratios}
    for key, ok in per_layout.items():
        value = state[key]
        if not (isinstance(value, list) and len(value) == n and all(ok(x) for x in value)):
            return f"{key!r} must hold {n} layout(s) of timings"
    return None


def _check_config(path: Path, got: dict[str, Any], want: dict[str, Any]) -> None:
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            raise StalesimError(f"--resume: {path} was measured with {key} = {_brief(got.get(key))}, this command "
                                f"has {_brief(want.get(key))} (resume with the same options, or use a new --out)")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ----------------------------------------------------------------------- shapes of the data
def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 1 << 20


def _is_map(x: Any, ok: Any) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) and ok(v) for k, v in x.items())


def _is_numbers(x: Any) -> bool:
    return isinstance(x, list) and all(_is_number(v) for v in x)


def _is_samples(x: Any) -> bool:  # per stage {kind: [seconds, ...]}
    return isinstance(x, list) and all(_is_map(s, _is_numbers) for s in x)


def _is_wait_samples(x: Any) -> bool:  # [[wait seconds, samples], ...]
    return isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 and _is_number(p[0])
                                       and _is_samples(p[1]) for p in x)


def _is_pass_means(x: Any) -> bool:  # per pass, per stage {kind: mean seconds}
    return isinstance(x, list) and all(isinstance(p, list) and all(_is_map(s, _is_number) for s in p) for p in x)


def _is_ratios(x: Any) -> bool:
    return _is_map(x, _is_numbers)


def _is_run(x: Any) -> bool:
    """A run's result as the executor returns it (or ``{"error": text}``): an object whose
    per-action rows, where kept, are rank -> rows of :data:`ROW_FIELDS` fields."""
    if not isinstance(x, dict):
        return False
    if "error" in x and not isinstance(x["error"], str):
        return False
    rows = x.get("rows")
    return rows is None or (isinstance(rows, dict) and all(
        isinstance(rank, str) and isinstance(rs, list) and all(_is_row(r) for r in rs) for rank, rs in rows.items()))


def _is_row(r: Any) -> bool:
    if not (isinstance(r, list) and len(r) == ROW_FIELDS):
        return False
    label, kind, stage, batch, micro, worker, start, end = r
    return (isinstance(label, str) and isinstance(kind, str) and all(_is_count(v) for v in (stage, batch, worker))
            and (micro is None or _is_count(micro)) and _is_number(start) and _is_number(end))
