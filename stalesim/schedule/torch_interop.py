"""torch.distributed.pipelining interop: torch's per-rank orders in, ours out as torch CSV.

**In** (:func:`torch_orders`, :func:`from_torch`): torch's schedule classes
compute every rank's action order in their constructor (``pipeline_order``:
rank -> list of ``_Action`` or None for an idle step). We instantiate the class
with stand-in stage objects (plain attributes: index, stage count, group size
and rank, no module, no process group), exactly as torch's own schedule tests
do, and never call its runtime. ``OVERLAP_F_B`` (DualPipeV's overlapped pair)
becomes its sub-actions in order, ``REDUCE_GRAD``/``UNSHARD``/``RESHARD`` are
dropped (our ``U`` after a rank's last backward plays their role), None is an
idle step. :func:`from_torch_csv` reads torch's CSV (one row per rank, cells
such as ``0F1``, ``3I0``, ``1W2``, empty = idle; ``compute_comms`` rows'
``SEND_*``/``RECV_*`` are dropped and re-lowered here) with torch's own
``_Action.from_str``.

Either way the per-rank order becomes our IR by :func:`schedule_from_orders`:
one torch step is one of our batches (M micro-batches, then each stage's ``U``
at the end of its rank's list, as ``optimizer.step()`` follows
``schedule.step()``), repeated for ``batches`` batches; the stage -> rank map is
read from where stages appear; our lowering, validation (every action once,
paired, deadlock-free) and version pass run on it, so torch's order is checked
by our semantics.

**Out** (:func:`to_torch_csv`): one flushed batch of our schedule in torch's
``compute_only`` CSV (F, B, I, W per rank; LOSS, U and our sends/receives are
torch's runtime's business), loadable with ``_PipelineScheduleRuntime._load_csv``
(the tests load every export that way, so torch's validator checks it).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stalesim.errors import ScheduleError
from stalesim.schedule.actions import Action, Kind, act
from stalesim.schedule.checks import validate
from stalesim.schedule.ir import MAX_COMPUTE_ACTIONS, Phase, Policy, Schedule
from stalesim.schedule.lowering import lower
from stalesim.schedule.versions import annotate

_COMPUTE = {"F": Kind.F, "B": Kind.B, "I": Kind.I, "W": Kind.W}
_DROPPED = {"REDUCE_GRAD", "UNSHARD", "RESHARD", "SEND_F", "RECV_F", "SEND_B", "RECV_B"}

RankOrders = dict[int, list[tuple[Kind, int, int]]]  # rank -> [(kind, stage, micro)]

# Bounds (docs/failure.md), so a typo is one line at once and not minutes of torch's
# Python: compute actions of one torch step (torch's constructors grow faster than
# linearly: ZB-V on 32 ranks x 128 micro-batches, 24,576 actions, takes 1.4 s, on 64 x
# 256, 98,304 actions, 9 s on a loaded 2-core box), and the size of a torch CSV (~5 bytes
# per cell; parsing takes ~2 us per cell).
MAX_TORCH_STEP_ACTIONS = 50_000
MAX_CSV_BYTES = 4 << 20

# one CSV cell, whole: empty (idle), an action as torch's _Action.__repr__ writes it
# ([stage][type][micro-batch]), or DualPipeV's "(a;b)OVERLAP_F_B"
_ONE = r"\d+(?:F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*"
_CELL = re.compile(rf"(?:|{_ONE}|\({_ONE}(?:;{_ONE})*\)OVERLAP_F_B)")


class _StandInStage:
    """What a torch schedule constructor reads of a stage (torch's tests mock the same)."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int) -> None:
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None
        self.stage_index_to_group_rank: dict[int, int] = {}


def torch_class(name: str) -> Any:
    """torch's schedule class for ``name`` (``Interleaved1F1B``, ``ScheduleZBVZeroBubble``, ...)."""
    try:
        from torch.distributed.pipelining import schedules as ts
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise ScheduleError(f"--from-torch: torch.distributed.pipelining is unavailable ({exc})") from None
    import inspect

    key = name[len("Schedule"):] if name.lower().startswith("schedule") else name
    known = "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV"
    try:
        cls = ts.get_schedule_class(key)
    except ValueError:
        raise ScheduleError(f"--from-torch: unknown torch schedule {name!r} (known: {known})") from None
    # torch's map also names its abstract bases (PipelineScheduleSingle/Multi): no order to read
    if inspect.isabstract(cls) or cls.__name__ in ("PipelineScheduleSingle", "PipelineScheduleMulti"):
        raise ScheduleError(f"--from-torch: {cls.__name__} is an abstract base class, not a schedule "
                            f"(use one of: {known})")
    return cls


def _is_v_shape(cls: Any) -> bool:
    return cls.__name__ in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def torch_orders(name: str, ranks: int, microbatches: int, stages_per_rank: int | None = None) -> RankOrders:
    """Every rank's compute order as torch's class ``name`` builds it (idle steps dropped)."""
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    cls = torch_class(name)
    for field, v in (("ranks", ranks), ("microbatches", microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"--{field}: expected an integer >= 1, got {v!r}")
    single = issubclass(cls, PipelineScheduleSingle)
    V = 1 if single else (2 if stages_per_rank is None and _is_v_shape(cls) else (stages_per_rank or 1))
    if single and stages_per_rank not in (None, 1):
        raise ScheduleError(f"--stages-per-rank: torch's {cls.__name__} runs one stage per rank "
                            f"(got {stages_per_rank})")
    if isinstance(V, bool) or not isinstance(V, int) or V < 1:
        raise ScheduleError(f"--stages-per-rank: expected an integer >= 1, got {V!r}")
    S = ranks * V
    step = 3 * ranks * V * microbatches  # F, B (or I and W) per stage and micro-batch
    if step > MAX_TORCH_STEP_ACTIONS:
        raise ScheduleError(f"--from-torch: ranks={ranks} x stages_per_rank={V} x microbatches={microbatches} "
                            f"is about {step:,} actions per step, more than this tool imports "
                            f"({MAX_TORCH_STEP_ACTIONS:,})")
    try:
        if single:
            sched = cls(_StandInStage(0, ranks, ranks, 0), microbatches)
            order = sched._get_pipeline_order()
        else:
            own = [0, 2 * ranks - 1] if _is_v_shape(cls) and V == 2 else [c * ranks for c in range(V)]
            stages = [_StandInStage(s, S, ranks, 0) for s in own]
            sched = cls(stages, microbatches)
            order = sched.pipeline_order
    except (ValueError, AssertionError, RuntimeError, TypeError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScheduleError(f"--from-torch: torch's {cls.__name__} rejects ranks={ranks} "
                            f"microbatches={microbatches} stages_per_rank={V}: {first}") from None
    if order is None:
        raise ScheduleError(f"--from-torch: torch's {cls.__name__} has no static order")
    out = {r: _flatten(order.get(r, [])) for r in range(ranks)}
    for r, ops in out.items():
        for kind, s, m in ops:
            if not 0 <= m < microbatches:
                # torch 2.14's Schedule1F1B._get_pipeline_order numbers the last rank's
                # forwards 1..M (its runtime runs 0..M-1): refuse rather than guess
                raise ScheduleError(
                    f"--from-torch: torch's {cls.__name__} reports {s}{kind.value}{m} on rank {r}, "
                    f"outside micro-batches 0..{microbatches - 1} (its static order is inconsistent)")
    return out


def _flatten(actions: Sequence[Any]) -> list[tuple[Kind, int, int]]:
    out: list[tuple[Kind, int, int]] = []
    for a in actions:
        if a is None:
            continue
        subs = getattr(a, "sub_actions", None)
        for x in (subs if subs else (a,)):
            kind = x.computation_type.value
            if kind in _DROPPED:
                continue
            if kind not in _COMPUTE:
                raise ScheduleError(f"torch action {x!r}: kind {kind} has no counterpart in the IR")
            if x.microbatch_index is None:
                raise ScheduleError(f"torch action {x!r}: a compute action needs a micro-batch index")
            out.append((_COMPUTE[kind], int(x.stage_index), int(x.microbatch_index)))
    return out


def read_torch_csv(path: str | os.PathLike[str]) -> RankOrders:
    """Per-rank orders from torch's CSV (one row per rank), parsed by torch's ``_Action.from_str``."""
    from torch.distributed.pipelining.schedules import _Action

    from stalesim.inputs import read_text

    text = read_text(path, "--from-torch-csv", MAX_CSV_BYTES)  # a regular file, bounded, UTF-8
    orders: RankOrders = {}
    rows = csv.reader(io.StringIO(text))
    r = 0
    try:
        for r, row in enumerate(rows):
            acts = []
            for i, cell in enumerate(row):
                # strict: torch's from_str matches a prefix, so "0F0junk" would read as 0F0
                if not _CELL.fullmatch(cell.strip()):
                    raise ScheduleError(f"--from-torch-csv: row {r + 1} (rank {r}) column {i}: cannot read "
                                        f"{cell[:40]!r} (expected e.g. 0F1, 3I0, 1W2, or empty)")
                try:
                    acts.append(_Action.from_str(cell))
                except (RuntimeError, ValueError):
                    raise ScheduleError(f"--from-torch-csv: row {r + 1} (rank {r}) column {i}: cannot read "
                                        f"{cell[:40]!r} (expected e.g. 0F1, 3I0, 1W2, or empty)") from None
            orders[r] = _flatten(acts)
    except csv.Error as exc:
        raise ScheduleError(f"--from-torch-csv: {os.fspath(path)!r} row {r + 1}: not CSV ({exc})") from None
    if not orders:
        raise ScheduleError(f"--from-torch-csv: {os.fspath(path)!r} has no rows")
    return orders


def schedule_from_orders(orders: RankOrders, *, batches: int = 1, name: str = "torch",
                         phase_schedule: str | None = None) -> Schedule:
    """Our lowered, validated, version-annotated schedule running ``orders`` for ``batches``
    flushed batches (see the module doc). ``phase_schedule``: the registered schedule whose
    facts (fast-path family) time it, when there is one."""
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ScheduleError(f"batches: expected an integer >= 1, got {batches!r}")
    R = len(orders)
    rank_of: dict[int, int] = {}
    micros: set[int] = set()
    for r, ops in orders.items():
        for _kind, s, m in ops:
            if rank_of.setdefault(s, r) != r:
                raise ScheduleError(f"stage {s} appears on ranks {rank_of[s]} and {r}")
            micros.add(m)
    if not rank_of:
        raise ScheduleError("the order has no compute actions")
    S = max(rank_of) + 1
    if len(rank_of) != S:  # without building range(S): a stage index may be huge
        first = next(k for k, s in enumerate(sorted(rank_of)) if k != s)
        raise ScheduleError(f"stage {first} appears on no rank (stages 0..{S - 1})")
    M = max(micros) + 1
    if len(micros) != M:
        first = next(k for k, m in enumerate(sorted(micros)) if k != m)
        raise ScheduleError(f"micro-batch {first} appears in no action")
    n = batches * sum(len(ops) + len({s for _k, s, _m in ops}) for ops in orders.values())
    if n > MAX_COMPUTE_ACTIONS:
        raise ScheduleError(f"batches: {batches:,} batches of this order are about {n:,} actions, more than "
                            f"this tool builds ({MAX_COMPUTE_ACTIONS:,}); use fewer batches")
    if S % R:
        raise ScheduleError(f"{S} stages do not divide evenly over {R} ranks")
    lists: list[list[Action]] = [[] for _ in range(R)]
    for t in range(batches):
        for r in range(R):
            own: list[int] = []
            for kind, s, m in orders[r]:
                lists[r].append(act(kind, s, t, m))
                if kind is Kind.F and s == S - 1:
                    lists[r].append(act(Kind.LOSS, s, t, m))
                if s not in own:
                    own.append(s)
            lists[r].extend(act(Kind.U, s, t) for s in sorted(own))
    split = frozenset((a.worker, a.stage, a.batch, a.micro)
                      for acts in lists for a in acts if a.kind is Kind.I)
    sched = Schedule(
        name=name, stages=S, batches=batches, microbatches=M, workers=1, policy=Policy.LATEST,
        device_actions=lists, placement=[[rank_of[s] for s in range(S)]], uses_micro=True,
        phases=(Phase(phase_schedule, 0, batches),) if phase_schedule else (),
        params={"source": name}, stages_per_device=S // R, split_keys=split,
    )
    sched = lower(sched)
    validate(sched)
    return annotate(sched)


def from_torch(name: str, ranks: int, microbatches: int, stages_per_rank: int | None = None, *,
               batches: int = 1) -> Schedule:
    """torch's schedule ``name`` as our IR (see :func:`torch_orders`)."""
    from stalesim.schedule.registry import SCHEDULES

    cls = torch_class(name)
    ours = next((n for n, sp in SCHEDULES.items() if sp.torch_name == cls.__name__), None)
    orders = torch_orders(name, ranks, microbatches, stages_per_rank)
    return schedule_from_orders(orders, batches=batches, name=f"torch:{cls.__name__}",
                                phase_schedule=ours)


def compute_orders(sched: Schedule) -> list[list[tuple[Kind, int, int, int | None]]]:
    """Per device, the compute actions F/B/I/W as (kind, stage, batch, micro): what two
    schedules must share to be the same order modulo naming and communication."""
    return [[(a.kind, a.stage, a.batch, a.micro) for a in acts if a.kind in _COMPUTE.values()]
            for acts in sched.device_actions]


def to_torch_rows(sched: Schedule) -> list[list[str]]:
    """Batch 0 of ``sched``: per device the compute actions in torch's text (``0F1``)."""
    if sched.data_parallel or sched.local_loss or sched.workers > 1:
        raise ScheduleError(f"--to-torch-csv: {sched.name!r} is not a pipeline with one loss; "
                            "torch's pipelining runs pipelines")
    if sched.versions is not None and (max(sched.versions.staleness(), default=0) > 0
                                       or sched.versions.inconsistent_stages()):
        raise ScheduleError(f"--to-torch-csv: {sched.name!r} is asynchronous (stale weights); "
                            "torch runs one flushed step at a time")
    rows: list[list[str]] = []
    for acts in sched.device_actions:
        row = []
        for a in acts:
            if a.batch != 0 or a.kind not in _COMPUTE.values():
                continue
            row.append(f"{a.stage}{a.kind.value}{0 if a.micro is None else a.micro}")
        rows.append(row)
    return rows


def to_torch_csv(sched: Schedule, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_torch_rows` as torch's compute-only CSV (atomically)."""
    from stalesim.atomic import write_text_atomic

    if not os.fspath(path).strip():
        raise ScheduleError("--to-torch-csv: empty file name (name the CSV file to write)")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in to_torch_rows(sched):
        writer.writerow(row)
    write_text_atomic(path, buf.getvalue())
    return Path(path)
