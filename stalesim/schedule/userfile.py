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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import COMM_KINDS, Action, Kind
from stalesim.schedule.checks import validate
from stalesim.schedule.ir import MAX_COMPUTE_ACTIONS, Policy, Schedule
from stalesim.schedule.lowering import lower
from stalesim.schedule.versions import annotate

FLAG = "--schedule-file"
FORMATS = (".json", ".csv")
MAX_JSON_BYTES = 64 << 20  # ~1.5 M action texts
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

        try:
            orders = read_torch_csv(path)
        except ScheduleError as exc:
            raise ScheduleError(str(exc).replace("--from-torch-csv", FLAG, 1)) from None
        return schedule_from_orders(orders, batches=batches or 1, name=f"torch-csv:{name}")
    from stalesim.inputs import read_text

    text = read_text(path, FLAG, MAX_JSON_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"{FLAG}: {os.fspath(path)!r} is not JSON ({exc.msg}, line {exc.lineno})") from None
    sched = _from_doc(doc, name)
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


def _from_doc(doc: Any, name: str) -> Schedule:
    if not isinstance(doc, dict) or not isinstance(doc.get("actions"), dict) or not doc["actions"]:
        raise ScheduleError(f"{FLAG}: {name}: expected a JSON object with \"actions\" (device -> list of "
                            "actions), as `stalesim schedule NAME --json` prints")
    raw = doc["actions"]
    try:
        devices = sorted(int(k) for k in raw)
    except (TypeError, ValueError):
        raise ScheduleError(f"{FLAG}: {name}: \"actions\" keys must be device numbers 0, 1, ...") from None
    if devices != list(range(len(devices))):
        raise ScheduleError(f"{FLAG}: {name}: devices must be numbered 0..{len(devices) - 1}, got {devices}")
    lists: list[list[Action]] = []
    total = 0
    for d in devices:
        texts = raw[str(d)] if str(d) in raw else raw[d]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ScheduleError(f"{FLAG}: {name}: actions of device {d} must be a list of texts such as \"0F1\"")
        total += len(texts)
        if total > MAX_COMPUTE_ACTIONS:
            raise ScheduleError(f"{FLAG}: {name}: more than {MAX_COMPUTE_ACTIONS:,} actions")
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
    S = max(a.stage for a in every) + 1
    P = max(a.worker for a in every) + 1
    placement = _placement(doc.get("placement"), lists, S, P, name)
    policy_text = doc.get("policy", "latest")
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
    if isinstance(spd, bool) or not isinstance(spd, int) or spd < 1:
        raise ScheduleError(f"{FLAG}: {name}: stages_per_device must be an integer >= 1, got {spd!r}")
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
