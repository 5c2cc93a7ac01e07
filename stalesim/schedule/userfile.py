"""A schedule written by the user (``--schedule-file``): our action-list JSON or torch's CSV.

Two formats, told apart by the file name:

* ``*.json``: what ``stalesim schedule NAME --json`` prints (export one, edit its order).
  Read: ``actions`` (device -> action texts such as ``0F1.2``, ``1B0``, ``0U0``),
  ``placement`` (worker -> stage -> device, default: from where the actions are) and
  ``policy`` (``latest``, ``stash``, ``double-buffer``; default ``latest``). Weight
  versions (``v1``) and sends/receives in the texts are ignored and derived again; the
  file fixes the number of batches, so a run is exactly its length.
* ``*.csv``: torch.distributed.pipelining's schedule CSV (one row per rank, cells such as
  ``0F1``, ``1I0``), read by :func:`~stalesim.schedule.torch_interop.read_torch_csv`; one
  row set is one flushed batch, repeated for the run's batches.

Either way the order goes through the IR's own passes: lowering (sends and receives),
validation (every action once, dependencies, no deadlock) and the version table, so a
schedule the IR would not build is refused here, in one line, before any model is built.

A schedule file may come from anyone, so its size and shape are bounded before anything is
built from it (:func:`_bounded_json`, :func:`_check_texts`, :func:`_check_extent`): the file's
bytes; JSON nesting (the parser's recursion) and numbers of more than
:data:`MAX_NUMBER_DIGITS` digits (Python refuses to convert 4,300); device keys written as
plain decimal numbers; each action text plain ASCII of at most :data:`MAX_ACTION_TEXT`
characters (``\\d`` also matches other scripts' digits); the action count; and the extent the
indices claim. A complete schedule runs every (worker, stage, batch, micro-batch) forward
exactly once, so stages x batches x micro-batches x workers must equal the forwards the file
holds: one ``0F99999999.0`` would otherwise make the IR size its tables for a hundred million
micro-batches before its own check could say one is missing. A torch CSV must be ASCII, read
before torch is imported.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import COMM_KINDS, Action, Kind
from stalesim.schedule.checks import validate
from stalesim.schedule.ir import Policy, Schedule
from stalesim.schedule.lowering import lower
from stalesim.schedule.versions import annotate

FLAG = "--schedule-file"
FORMATS = (".json", ".csv")
MAX_JSON_BYTES = 64 << 20  # ~1.5 M action texts
# a number in a schedule file: an index, a count (a 64-bit integer has 19 digits)
MAX_NUMBER_DIGITS = 19
# texts (compute and communication) a file may hold per compute action, read before any is
# parsed: an exported order has at most a send and a receive beside each compute action
TEXTS_PER_ACTION = 3
# an action text: "w<worker>:<stage><KIND><batch>.<micro>v<version>" with 7-digit indices is 40
MAX_ACTION_TEXT = 64
_DEVICE_KEY = re.compile(r"0|[1-9][0-9]{0,8}")
_ASCII_TEXT = re.compile(r"[ -~]*")
# the actions that carry a micro-batch index when a schedule splits batches (U and AR do not)
_PER_MICRO = frozenset({Kind.F, Kind.B, Kind.I, Kind.W, Kind.LOSS})


def fill_from_file(path: str | os.PathLike[str], fields: dict[str, Any]) -> dict[str, Any]:
    """Training-config fields (missing or None: not given) completed with what the schedule
    file fixes: its name as the schedule, its stages (unless a PPV gives them), micro-batches
    and workers where left at 1, and the iterations of a JSON file. The file is read and
    checked by the IR here; what disagrees is left for the config's own check to name."""
    out = dict(fields)
    if out.get("schedule") is not None:
        raise ScheduleError(f"{FLAG}: give a schedule name or a schedule file, not both")
    if out.get("epochs") is not None:
        raise ScheduleError(f"{FLAG}: a schedule file runs --iterations, not --epochs")
    if out.get("iterations") is None:
        out["iterations"] = file_batches(path)
    sched = load_schedule_file(path, out["iterations"] or 1)
    out["schedule"] = sched.name
    if out.get("stages") is None and out.get("ppv") is None:
        out["stages"] = sched.stages
    for name, value in (("microbatches", sched.microbatches), ("workers", sched.workers)):
        if out.get(name) in (None, 1):
            out[name] = value
    return out


def file_batches(path: str | os.PathLike[str]) -> int | None:
    """Batches a schedule file fixes (our JSON), or None when the run chooses (torch CSV)."""
    if _suffix(path) == ".csv":
        return None
    return load_schedule_file(path).batches


def load_schedule_file(path: str | os.PathLike[str], batches: int | None = None) -> Schedule:
    """The checked, lowered, version-annotated schedule in ``path`` (see the module doc).

    ``batches``: the run's length; a torch CSV repeats its step that many times (default 1),
    a JSON file must hold exactly that many batches (None: as many as it holds)."""
    suffix = _suffix(path)
    name = Path(path).name
    if suffix == ".csv":
        from stalesim.schedule.torch_interop import read_torch_csv, schedule_from_orders

        _check_csv_text(path)
        try:
            orders = read_torch_csv(path)
        except ScheduleError as exc:
            raise ScheduleError(str(exc).replace("--from-torch-csv", FLAG, 1)) from None
        return schedule_from_orders(orders, batches=batches or 1, name=f"torch-csv:{name}")
    from stalesim.inputs import read_text

    text = read_text(path, FLAG, MAX_JSON_BYTES)
    sched = _from_doc(_bounded_json(text, path), name)
    if batches is not None and sched.batches != batches:
        raise ScheduleError(f"{FLAG}: {name} holds {sched.batches} batch(es) but the run asks for {batches} "
                            f"(drop --iterations, or export a schedule of {batches} batches)")
    return sched


def _suffix(path: str | os.PathLike[str]) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ScheduleError(f"{FLAG}: {os.fspath(path)!r}: expected a .json file (stalesim schedule NAME "
                            "--json) or a .csv file (torch.distributed.pipelining's schedule CSV)")
    return suffix


def _bounded_json(text: str, path: str | os.PathLike[str]) -> Any:
    """The parsed file, refusing numbers too long to be an index and nesting too deep for
    the parser, in one line (never ``ValueError`` or ``RecursionError``)."""
    where = f"{FLAG}: {os.fspath(path)!r}"

    def number(kind: type) -> Any:
        def parse(digits: str) -> Any:
            if len(digits) > MAX_NUMBER_DIGITS + (0 if kind is int else 8):
                raise ScheduleError(f"{where}: a number of {len(digits):,} characters ({digits[:12]}...) is "
                                    f"longer than any index or count (at most {MAX_NUMBER_DIGITS} digits)")
            return kind(digits)
        return parse

    def constant(name: str) -> Any:
        raise ScheduleError(f"{where}: {name} is not a number a schedule file holds")

    try:
        return json.loads(text, parse_int=number(int), parse_float=number(float), parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"{where} is not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise ScheduleError(f"{where}: nested too deeply to be a schedule file") from None


def _check_csv_text(path: str | os.PathLike[str]) -> None:
    """A torch CSV holds ASCII cells only (``0F1``, ``1I0``): anything else is refused
    here, naming the row, before torch is imported to read it."""
    from stalesim.inputs import read_text
    from stalesim.schedule.torch_interop import MAX_CSV_BYTES

    for r, line in enumerate(read_text(path, FLAG, MAX_CSV_BYTES).splitlines()):
        if not _ASCII_TEXT.fullmatch(line.replace("\t", " ")):
            bad = next(c for c in line if not " " <= c <= "~" and c != "\t")
            raise ScheduleError(f"{FLAG}: {os.fspath(path)!r} row {r + 1}: {bad!r} is not a character of a torch "
                                "schedule CSV (cells such as 0F1, 3I0, 1W2)")


def _check_texts(texts: Any, d: int, name: str) -> list[str]:
    """Device ``d``'s action texts, each a short ASCII text (checked before any is parsed)."""
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ScheduleError(f"{FLAG}: {name}: actions of device {d} must be a list of texts such as \"0F1\"")
    for t in texts:
        if len(t) > MAX_ACTION_TEXT or not _ASCII_TEXT.fullmatch(t):
            shown = t[:24] + ("..." if len(t) > 24 else "")
            raise ScheduleError(f"{FLAG}: {name}: device {d}: {shown!r} is not an action text (at most "
                                f"{MAX_ACTION_TEXT} ASCII characters, e.g. \"0F1\", \"1B0.2\")")
    return texts


def max_file_actions() -> int:
    """Compute actions a JSON schedule file may hold: what ``stalesim schedule NAME --json``
    exports at most. A file is an order to read and edit; a long run of one step repeats a
    torch CSV, so a longer file is refused before its order is built (a million actions
    took 42 s and 2 GB to lower and check here, before any training)."""
    from stalesim.limits import MAX_SHOWN

    return MAX_SHOWN


def _too_long(name: str, what: str) -> ScheduleError:
    return ScheduleError(f"{FLAG}: {name}: {what}, more than a schedule file holds ({max_file_actions():,} "
                         "compute actions, what `stalesim schedule NAME --json` exports); for a long run of one "
                         "step, give torch's CSV of one batch")


def _check_extent(every: list[Action], name: str) -> None:
    """The indices span exactly the forwards the file holds (see the module doc), checked
    before any table is sized by them."""
    forwards = {(a.worker, a.stage, a.batch, a.micro) for a in every if a.kind is Kind.F}
    spans = [("stage", max(a.stage for a in every) + 1), ("batch", max(a.batch for a in every) + 1),
             ("micro-batch", max((a.micro or 0) for a in every) + 1), ("worker", max(a.worker for a in every) + 1)]
    extent = 1
    for _what, n in spans:
        extent *= n
    if extent != len(forwards):
        what, n = max(spans, key=lambda x: x[1])
        sizes = " x ".join(f"{k:,}" for _w, k in spans)
        raise ScheduleError(f"{FLAG}: {name}: its {what} indices reach {n - 1:,}: stages x batches x micro-batches "
                            f"x workers = {sizes} need {extent:,} forward actions, the file holds {len(forwards):,}")


def _from_doc(doc: Any, name: str) -> Schedule:
    if not isinstance(doc, dict) or not isinstance(doc.get("actions"), dict) or not doc["actions"]:
        raise ScheduleError(f"{FLAG}: {name}: expected a JSON object with \"actions\" (device -> list of "
                            "actions), as `stalesim schedule NAME --json` prints")
    raw = doc["actions"]
    odd = next((k for k in raw if not _DEVICE_KEY.fullmatch(k)), None)
    if odd is not None:
        raise ScheduleError(f"{FLAG}: {name}: \"actions\" keys must be device numbers 0, 1, ..., got {odd[:24]!r}")
    devices = sorted(int(k) for k in raw)
    if devices != list(range(len(devices))):
        raise ScheduleError(f"{FLAG}: {name}: devices must be numbered 0..{len(devices) - 1}, got {devices}")
    lists: list[list[Action]] = []
    total, most = 0, max_file_actions()
    for d in devices:
        texts = _check_texts(raw[str(d)], d, name)
        total += len(texts)
        if total > TEXTS_PER_ACTION * most:
            raise _too_long(name, f"more than {TEXTS_PER_ACTION * most:,} action texts")
        try:
            acts = [Action.parse(t) for t in texts]
        except ScheduleError as exc:
            raise ScheduleError(f"{FLAG}: {name}: device {d}: {exc}") from None
        # versions and communication are derived, never trusted from the file
        lists.append([Action(a.kind, a.stage, a.batch, a.micro, a.worker) for a in acts
                      if a.kind not in COMM_KINDS])
    every = [a for acts in lists for a in acts]
    if not every:
        raise ScheduleError(f"{FLAG}: {name}: the schedule has no actions")
    if len(every) > most:
        raise _too_long(name, f"{len(every):,} compute actions")
    _check_extent(every, name)
    S = max(a.stage for a in every) + 1
    P = max(a.worker for a in every) + 1
    placement = _placement(doc.get("placement"), lists, S, P, name)
    policy_text = doc.get("policy", "latest")
    if not isinstance(policy_text, str):
        raise ScheduleError(f"{FLAG}: {name}: policy must be one of {', '.join(p.value for p in Policy)}, "
                            f"got {type(policy_text).__name__}")
    try:
        policy = Policy(policy_text)
    except ValueError:
        raise ScheduleError(f"{FLAG}: {name}: policy must be one of {', '.join(p.value for p in Policy)}, "
                            f"got {policy_text!r}") from None
    micros = {a.micro for a in every if a.kind in _PER_MICRO}
    uses_micro = micros != {None}
    if uses_micro and None in micros:
        raise ScheduleError(f"{FLAG}: {name}: either every F/B/LOSS names a micro-batch (0F1.0) or none does")
    M = max((m for m in micros if m is not None), default=0) + 1
    data_parallel = any(a.kind is Kind.AR for a in every)
    local_loss = any(a.kind is Kind.LOSS and a.stage < S - 1 for a in every)
    spd = doc.get("stages_per_device", max(1, S // len(lists)))
    if isinstance(spd, bool) or not isinstance(spd, int) or not 1 <= spd <= S:
        raise ScheduleError(f"{FLAG}: {name}: stages_per_device must be an integer in [1, {S}] (the stages), "
                            f"got {spd!r}")
    split = frozenset((a.worker, a.stage, a.batch, a.micro) for a in every if a.kind is Kind.I)
    sched = Schedule(
        name=f"file:{name}", stages=S, batches=max(a.batch for a in every) + 1,
        microbatches=M if uses_micro else 1, workers=P, policy=policy, device_actions=lists,
        placement=placement, uses_micro=uses_micro, local_loss=local_loss, data_parallel=data_parallel,
        params={"source": name}, stages_per_device=spd, split_keys=split,
    )
    sched = lower(sched)
    try:
        validate(sched)
    except ScheduleError as exc:
        raise ScheduleError(f"{FLAG}: {name}: {exc}") from None
    return annotate(sched)


def _placement(raw: Any, lists: list[list[Action]], S: int, P: int, name: str) -> list[list[int]]:
    """worker -> stage -> device: the file's, or where each (worker, stage) has its actions."""
    seen: dict[tuple[int, int], int] = {}
    for d, acts in enumerate(lists):
        for a in acts:
            if seen.setdefault((a.worker, a.stage), d) != d:
                raise ScheduleError(f"{FLAG}: {name}: stage {a.stage} of worker {a.worker} has actions on "
                                    f"devices {seen[(a.worker, a.stage)]} and {d}")
    if raw is None:
        missing = [(w, s) for w in range(P) for s in range(S) if (w, s) not in seen]
        if missing:
            w, s = missing[0]
            raise ScheduleError(f"{FLAG}: {name}: stage {s} of worker {w} has no actions")
        return [[seen[(w, s)] for s in range(S)] for w in range(P)]
    ok = (isinstance(raw, list) and len(raw) == P and all(
        isinstance(row, list) and len(row) == S
        and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < len(lists) for d in row)
        for row in raw))
    if not ok:
        raise ScheduleError(f"{FLAG}: {name}: placement must be {P} list(s) of {S} device numbers "
                            f"below {len(lists)}")
    for (w, s), d in seen.items():
        if raw[w][s] != d:
            raise ScheduleError(f"{FLAG}: {name}: placement puts stage {s} of worker {w} on device "
                                f"{raw[w][s]}, but its actions are on device {d}")
    return [list(row) for row in raw]
