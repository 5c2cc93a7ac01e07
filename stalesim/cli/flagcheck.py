"""One flag-checking layer for ``plan``, ``sweep`` and ``simulate`` (with and without ``--workload``),
read off the parser's own declarations, run before any work.

Three kinds of check, each declared once:

* **Values.** Every flag's argparse ``type`` carries its range (:func:`stalesim.cli.common.int_type`)
  or its choices (:func:`choice_type`, with the kind set imported from the module that defines it),
  and a comma list (:func:`list_of`) checks each item with the item's own type. argparse then
  refuses a bad value in one line that names the flag. A catalog name (:func:`catalog_type`)
  declares its lookup instead, which :func:`check_values` runs when the command starts. The
  declarations stay on the type (``bounds``, ``choices``, ``item``, ``check``), so the tests and
  the fuzzer derive their bad values from the same place.
* **Which mode a flag applies to.** A flag of the LLM group (:data:`LLM_GROUP`)
  needs ``--workload``; any other flag given with ``--workload`` must be one the closed-form path
  reads (:data:`WORKLOAD_READS`), else it is refused rather than ignored. "Given" means "differs
  from the parser's default", read off the parser, so a flag added tomorrow is covered tomorrow:
  unless someone says the closed form reads it, ``--workload`` refuses it.
* **Combinations.** :data:`EXCLUSIVE` pairs, and for the LLM estimate :func:`check_plan`:
  :meth:`stalesim.sim.llm_plan.ParallelPlan.check` (degrees, batch split, ZeRO, SP, layers
  over stages: never repeated here) on every plan the command will run, plus the one rule that
  needs the cluster (the GPUs fill whole nodes). A sweep grid's value that no grid point can use
  is refused (:func:`refuse_dead_values`), so a typo in a list is never dropped in silence.

Messages keep the project's convention, ``<field>: ...``; a ParallelPlan field that is not a
flag's name is renamed to the flag the user typed (:data:`FIELD_FLAGS`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from stalesim.errors import StalesimError
from stalesim.limits import MAX_COUNT

if TYPE_CHECKING:
    from stalesim.sim.llm_plan import ParallelPlan
    from stalesim.workloads.hardware import Hardware
    from stalesim.workloads.transformer import TransformerSpec

T = TypeVar("T")

# the flags (by dest) outside the LLM group that each command's --workload path reads; every
# other flag given with --workload is refused (the cluster flags: stalesim.cli.llm_args.llm_hardware)
_CLUSTER = ("node", "node_size", "intra_link", "inter_link", "inter_algorithm")
WORKLOAD_READS: dict[str, tuple[str, ...]] = {
    "simulate": (*_CLUSTER, "hardware", "target", "link", "schedule", "batch_size", "workers", "stages",
                 "microbatches", "stages_per_device", "json"),
    "sweep": (*_CLUSTER, "targets", "links", "schedules", "batch_size", "workers", "stages", "microbatches",
              "stages_per_device", "json", "csv", "top"),
    "plan": (*_CLUSTER, "hardware", "target", "link", "devices", "batch_size", "microbatches", "schedules",
             "mitigations", "iterations", "out", "json", "quiet"),
}
# given together, one of each pair would be ignored: (flag, flag) by dest
EXCLUSIVE: dict[str, tuple[tuple[str, str], ...]] = {
    "sweep": (("gpus", "workers"),),
}
# ParallelPlan fields whose name is not the flag the user typed (per command)
FIELD_FLAGS: dict[str, dict[str, str]] = {
    "simulate": {"global_batch": "--batch-size", "dp": "--workers", "chunks": "--stages-per-device"},
    "sweep": {"global_batch": "--batch-size", "dp": "--workers", "chunks": "--stages-per-device",
              "schedule": "--schedules"},
    "plan": {"global_batch": "--batch-size", "dp": "--devices", "chunks": "--schedules",
             "error_feedback": "--mitigations", "schedule": "--schedules"},
}
# the parser of each command, recorded by declare() when the command registers
_PARSERS: dict[str, argparse.ArgumentParser] = {}


# ------------------------------------------------------------------ value declarations
def choice_type(kinds: Sequence[str] | Callable[[], Sequence[str]], what: str = "a name") -> Callable[[str], str]:
    """argparse type: one of ``kinds`` (a sequence, or a function giving it when the flag is read,
    for registries that grow); the kinds stay on the type as ``choices``."""

    def known() -> Sequence[str]:
        return kinds() if callable(kinds) else kinds

    def parse(text: str) -> str:
        value = text.strip()
        if value not in known():
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(known())}, got {text[:40]!r}")
        return value

    parse.__name__ = what
    parse.choices = known  # type: ignore[attr-defined]  # read by the flag tests and the fuzzer
    return parse


#: the title of the parser group holding the LLM-workload flags (``stalesim.cli.llm_args``)
LLM_GROUP = "LLM workloads (analytic transformer: no profile, no model built)"

def looked_up(lookup: Callable[[str], object], names: Callable[[], Sequence[str]],
               what: str = "a catalog name") -> Callable[[str], str]:
    """argparse type: a name ``lookup`` knows (a catalog device, link or node, with the catalog's
    own spellings and its one-line error), declared as ``check`` and ``choices``. The text is kept;
    :func:`check_modes` runs ``lookup`` when the command starts, so a bad name is a
    :class:`StalesimError` naming the flag, as every other error the command reports."""

    def parse(text: str) -> str:
        return text

    parse.__name__ = what
    parse.check = lookup  # type: ignore[attr-defined]
    parse.choices = names  # type: ignore[attr-defined]
    return parse


def catalog_type(kind: str) -> Callable[[str], str]:
    """:func:`looked_up` for a catalog ``device``, ``link`` or ``node``
    (:mod:`stalesim.workloads.hardware`), read when the flag is."""
    from stalesim.workloads import hardware as hw

    lookups: dict[str, tuple[Callable[[str], object], Callable[[], Sequence[str]]]] = {
        "device": (hw.get_device, hw.device_names), "link": (hw.get_link, hw.link_names),
        "node": (hw.get_node, hw.node_names)}
    if kind not in lookups:
        raise ValueError(f"catalog_type: no catalog of {kind!r}")
    return looked_up(*lookups[kind], what=f"catalog {kind}")


def int_choice_type(kinds: Sequence[int], what: str = "a number") -> Callable[[str], int]:
    """argparse type: one of the integers ``kinds`` (ZeRO's stages), declared as ``choices``."""
    names = choice_type([str(k) for k in kinds], what)

    def parse(text: str) -> int:
        return int(names(text))

    parse.__name__ = what
    parse.choices = names.choices  # type: ignore[attr-defined]
    return parse


def list_of(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """argparse type: comma-separated values, each checked by ``item`` (an empty item is a typo)."""

    def parse(text: str) -> list[T]:
        parts = [p.strip() for p in text.split(",")]
        if any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text[:40]!r} (an empty item)")
        if len(parts) > MAX_COUNT:
            raise argparse.ArgumentTypeError(f"{len(parts):,} items are more than this tool handles")
        return [item(p) for p in parts]

    parse.__name__ = f"comma-separated {getattr(item, '__name__', 'values')}"
    parse.item = item  # type: ignore[attr-defined]
    for attr in ("bounds", "choices", "check"):  # what the item declares, the list declares per item
        if hasattr(item, attr):
            setattr(parse, attr, getattr(item, attr))
    return parse


# ------------------------------------------------------------------ which mode a flag applies to
def declare(command: str, parser: argparse.ArgumentParser) -> None:
    """Record ``command``'s parser (its defaults tell a given flag from a left-out one)."""
    _PARSERS[command] = parser


def _flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.Action]]:
    """dest -> (the flag as typed in help, its action), for every option of ``parser``."""
    out: dict[str, tuple[str, argparse.Action]] = {}
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or not a.option_strings or a.default is argparse.SUPPRESS:
            continue
        if a.dest not in out:
            longs = [s for s in a.option_strings if s.startswith("--")]
            out[a.dest] = ((longs or a.option_strings)[0], a)
    return out


def _given(command: str, args: argparse.Namespace) -> list[tuple[str, str, argparse.Action]]:
    parser = _PARSERS.get(command)
    if parser is None:
        return []
    return [(dest, flag, a) for dest, (flag, a) in _flags(parser).items()
            if getattr(args, dest, a.default) not in (a.default,)]


def given(command: str, args: argparse.Namespace) -> list[tuple[str, str]]:
    """(dest, flag) of every option ``args`` sets to something other than its default."""
    return [(dest, flag) for dest, flag, _ in _given(command, args)]


def check_values(command: str, args: argparse.Namespace) -> None:
    """Run the lookups the flags' types declare (``check``: a catalog name) on the values given."""
    for dest, flag, a in _given(command, args):
        check = getattr(a.type, "check", None)
        if check is None:
            continue
        value = getattr(args, dest)
        for v in value if isinstance(value, list) else [value]:
            try:
                check(v)
            except StalesimError as exc:
                raise StalesimError(f"{flag}: {exc}") from None


def llm_dests(command: str) -> frozenset[str]:
    """The dests of the LLM group of ``command``'s parser."""
    parser = _PARSERS.get(command)
    groups = [g for g in (parser._action_groups if parser else []) if g.title == LLM_GROUP]
    return frozenset(a.dest for g in groups for a in g._group_actions)


def check_modes(command: str, args: argparse.Namespace) -> None:
    """LLM flags without ``--workload``; flags the closed form does not read with it; exclusive pairs;
    then the declared lookups (:func:`check_values`)."""
    llm = llm_dests(command) - {"workload", "model_spec"}
    flags = given(command, args)
    if getattr(args, "workload", None) is None:
        for dest, flag in flags:
            if dest in llm:
                raise StalesimError(f"{flag}: needs --workload NAME or --model-spec FILE (an analytic transformer)")
    else:
        reads = set(WORKLOAD_READS.get(command, ())) | llm | {"workload", "model_spec"}
        for dest, flag in flags:
            if dest not in reads:
                raise StalesimError(f"{flag}: does not apply to --workload (the closed-form LLM estimate "
                                    f"reads no such setting)")
    names = dict(flags)
    for a, b in EXCLUSIVE.get(command, ()):
        if a in names and b in names:
            raise StalesimError(f"{names[b]}: give either {names[a]} or {names[b]}, not both "
                                f"({names[a]} decides it)")
    check_values(command, args)


# ------------------------------------------------------------------ combinations of the LLM estimate
def flag_error(command: str, exc: StalesimError) -> StalesimError:
    """``exc`` with a ParallelPlan field renamed to the flag of ``command`` that sets it."""
    text = str(exc)
    field, sep, rest = text.partition(": ")
    flag = FIELD_FLAGS.get(command, {}).get(field)
    return StalesimError(f"{flag}: {rest}") if sep and flag else exc


def check_whole_nodes(gpus: int, hw: Hardware) -> None:
    """A job of more GPUs than a node takes whole nodes (torchrun, and so Megatron-LM, starts the
    same ``--nproc-per-node`` ranks on every node), so its GPUs are a multiple of the node size."""
    node = hw.cluster.node_size if hw.cluster is not None else None
    if node is not None and gpus > node and gpus % node:
        raise StalesimError(f"node_size: {gpus} GPUs (tp x cp x pp x dp) do not fill whole nodes of {node}")


def check_plan(plan: ParallelPlan, spec: TransformerSpec, hw: Hardware) -> None:
    """Everything a plan must satisfy on ``hw``: ParallelPlan's own check with the node size, and
    whole nodes."""
    plan.check(spec, hw.cluster.node_size if hw.cluster is not None else None)
    check_whole_nodes(plan.gpus, hw)


def refuse_dead_values(command: str, grid: Mapping[str, Sequence[object]],
                       points: Iterable[tuple[Mapping[str, object], StalesimError | None]]) -> list[str]:
    """Refuse a value of a swept flag that no grid point can use (or a grid where none can), with
    one such point's own reason; ``grid``: flag -> the values given, ``points``: each point's
    values by flag and its error (None: it applies). Returns the reasons of the points left out."""
    pts = list(points)
    fine = [vals for vals, err in pts if err is None]
    failed = [(vals, err) for vals, err in pts if err is not None]
    if not failed:
        return []
    if not fine:
        reason = Counter(str(e) for _, e in failed).most_common(1)[0][0]
        raise flag_error(command, StalesimError(reason))
    for flag, values in grid.items():
        if len(values) < 2:
            continue
        for v in values:
            if not any(vals.get(flag) == v for vals in fine):
                err = next(e for vals, e in failed if vals.get(flag) == v)
                raise flag_error(command, StalesimError(f"{flag}: {v} fits no point of the grid: {err}"))
    return [str(e) for _, e in failed]


def note_left_out(command: str, reasons: Sequence[str]) -> None:
    """One warning line for the grid points that cannot apply (the others are answered)."""
    if reasons:
        top, n = Counter(reasons).most_common(1)[0]
        print(f"stalesim: warning: {command}: {len(reasons)} grid point(s) cannot apply and are left out "
              f"({n} of them: {top})", file=sys.stderr)
