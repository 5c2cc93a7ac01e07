"""The layering the design rests on, checked on the source (no imports executed).

* Schedule facts live in the IR: no module outside ``stalesim/schedule/`` compares a
  schedule name (``x == "stale"``, ``name in ("dp", "pipe-sgd")``, ``match``/``case``).
* Layers: base (errors, limits, inputs, atomic, trace, devices, checkpoint_io, rendezvous, progress,
  units, schedule, workloads) <- runtime <- consumers
  (sim, emulator, executor) <- comparers, figures and the Python API (validate, figures, plan,
  api) <- CLI <- ``lab`` (the repository's tooling, not installed). A module imports only from
  its own layer or below (so nothing in ``stalesim`` imports ``lab``); no consumer imports another
  consumer; nothing below the CLI, the Python API included, imports ``stalesim.cli``.
* No import cycle between modules (top-level and function-level imports alike).
* Action kinds are grouped in one place: no module outside ``stalesim/schedule/`` spells a
  set of two or more kind names (``("F", "B", "U", "LOSS")``); it imports the sets of
  :mod:`stalesim.schedule.actions` instead. Dicts keyed by kind (colour tables) are allowed.
* Files are written through ``stalesim/atomic.py`` (docs/CONTRACTS.md): no plain
  ``open(path, "w")`` elsewhere, bar the one live log listed in ``LIVE_WRITERS``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalesim.schedule import schedule_names
from stalesim.schedule.actions import Kind

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stalesim", "lab")  # the installed package and the repository's tooling beside it
NAMES = set(schedule_names())
KIND_NAMES = {k.value for k in Kind}

# layer of each top-level area (lower number = lower layer)
LAYER = {
    "stalesim.errors": 0, "stalesim.atomic": 0, "stalesim.trace": 0, "stalesim.devices": 0,
    "stalesim.checkpoint_io": 0, "stalesim.rendezvous": 0, "stalesim.schedule": 0, "stalesim.limits": 0,
    "stalesim.inputs": 0, "stalesim.outlock": 0, "stalesim.lifetime": 0, "stalesim.progress": 0, "stalesim.units": 0,
    "stalesim.plugins": 0, "stalesim.threads": 0, "stalesim.tbevents": 0,
    "stalesim.summary": 0,
    "stalesim.workloads": 1, "stalesim.runtime": 2,
    "stalesim.launch": 2,  # where a study's jobs run: below the emulator that hands it the jobs
    "stalesim.sim": 3, "stalesim.emulator": 3, "stalesim.inject": 3, "stalesim.executor": 3,
    "stalesim.validate": 4, "stalesim.figures": 4, "stalesim.plan": 4,
    "stalesim.cost": 4,  # the cost model simulate, sweep, plan and validate predict with
    "stalesim.api": 4,  # the Python API: beside the CLI, not on it (the facts both need live lower)
    "stalesim.cli": 5, "stalesim.__main__": 5, "stalesim": 5,
    "lab": 6,  # the repository's tooling (not installed): may use all of stalesim, never used by it
}
CONSUMERS = ("stalesim.sim", "stalesim.emulator", "stalesim.inject", "stalesim.executor")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _area(module: str) -> str:
    best = ""
    for key in LAYER:
        if (module == key or module.startswith(key + ".")) and len(key) > len(best):
            best = key
    return best


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _imports(module: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import that runs, resolved against the known modules."""
    pkg = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            for alias in node.names:  # `from pkg import module`
                if f"{name}.{alias.name}" in MODULES:
                    yield node.lineno, f"{name}.{alias.name}"


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[mod] = {k for _, n in _imports(mod, tree) if (k := _known(n)) and k != mod}
    return graph


def _is_name_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_name_literal(e) for e in node.elts)
    return False


def test_no_schedule_name_is_compared_outside_the_ir() -> None:
    offenders = []
    for mod, path in MODULES.items():
        if mod.startswith("stalesim.schedule"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                if any(_is_name_literal(x) for x in [node.left, *node.comparators]):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.match_case) and _is_name_literal(getattr(node.pattern, "value", None)
                                                                        or ast.Constant(None)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.pattern.lineno}")
    assert not offenders, "schedule names compared outside stalesim/schedule: " + ", ".join(offenders)


def _kind_set_literals(tree: ast.AST) -> Iterator[int]:
    """Line of every tuple/list/set literal (also ``frozenset({...})``'s) naming 2+ action kinds."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            kinds = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in KIND_NAMES}
            if len(kinds) >= 2:
                yield node.lineno


def test_no_kind_set_is_spelled_outside_the_ir() -> None:
    offenders = []
    paths = [p for m, p in MODULES.items() if not m.startswith("stalesim.schedule")]
    paths += sorted((ROOT / "benchmarks").rglob("*.py"))
    for path in paths:
        for line in _kind_set_literals(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, ("action-kind sets spelled outside stalesim/schedule (import them from "
                           "stalesim.schedule.actions): " + ", ".join(offenders))


@pytest.mark.parametrize("snippet, hit", [
    ('_C = ("F", "B", "U", "LOSS")', True), ('k in {"SEND_F", "RECV_F"}', True),
    ('x = frozenset(["I", "W"])', True), ('c = {"F": "red", "B": "blue"}', False),
    ('u = ("B", "KiB", "MiB")', False), ('k == "F" or k == "B"', False),
])
def test_the_kind_set_check_itself(snippet: str, hit: bool) -> None:
    assert bool(list(_kind_set_literals(ast.parse(snippet)))) is hit


# modules allowed a plain write, and why: a live log must keep what a killed step printed
LIVE_WRITERS = {"lab.gpucheck.runner"}


def _plain_writes(tree: ast.AST) -> Iterator[int]:
    """Line of every builtin ``open(...)`` whose mode writes (w, a, x or +)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
                    and set(mode.value) & set("wax+"):
                yield node.lineno


def test_files_are_written_atomically() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for mod, path in MODULES.items()
                 if mod != "stalesim.atomic" and mod not in LIVE_WRITERS
                 for line in _plain_writes(ast.parse(path.read_text(), str(path)))]
    assert not offenders, "plain open(..., 'w') outside stalesim/atomic.py: " + ", ".join(offenders)


@pytest.mark.parametrize("snippet, hit", [
    ('open(p, "w")', True), ('open(p, mode="ab")', True), ('open(p)', False), ('open(p, "rb")', False),
    ('atomic_open(p, "w")', False), ('gzip.open(p, "wb")', False),
])
def test_the_write_check_itself(snippet: str, hit: bool) -> None:
    assert bool(list(_plain_writes(ast.parse(snippet)))) is hit


def test_layers_consumers_and_the_cli() -> None:
    bad = []
    for mod, deps in _edges().items():
        a = _area(mod)
        for dep in deps:
            b = _area(dep)
            if not a or not b or a == b:
                continue
            if LAYER[b] > LAYER[a]:
                bad.append(f"{mod} (layer {LAYER[a]}) imports {dep} (layer {LAYER[b]})")
            elif a in CONSUMERS and b in CONSUMERS:
                bad.append(f"consumer {mod} imports consumer {dep}")
    assert not bad, "\n".join(bad)


def test_nothing_below_the_cli_imports_it() -> None:
    """The API and the commands share facts (thread defaults, a run's device count) through
    the modules that own them: an API that imports the CLI would load argparse code and tie
    a library call to a command's internals."""
    cli = LAYER["stalesim.cli"]
    bad = [f"{mod} imports {dep}" for mod, deps in _edges().items()
           if _area(mod) and LAYER[_area(mod)] < cli
           for dep in deps if _area(dep) == "stalesim.cli"]
    assert LAYER["stalesim.api"] < cli
    assert not bad, "\n".join(bad)


def test_the_cli_check_itself() -> None:
    """The check above sees the import the API used to make (a function-level one)."""
    tree = ast.parse("def run():\n    from stalesim.cli.run_cmd import expected_devices\n")
    deps = {_known(n) for _, n in _imports("stalesim.api", tree)}
    assert "stalesim.cli.run_cmd" in deps and _area("stalesim.cli.run_cmd") == "stalesim.cli"


def test_no_import_cycles() -> None:
    graph = _edges()
    # a package's __init__ re-exporting its own modules is not a cycle of behaviour
    graph = {m: {d for d in deps if not (m and d.startswith(m + "."))} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d, 0) == 0:
                visit(d)
            elif state[d] == 1:
                cycles.append(stack[stack.index(d):] + [d])
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if state.get(m, 0) == 0:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


@pytest.mark.parametrize("snippet, hit", [
    ('x == "stale"', True), ('name in ("dp", "pipe-sgd")', True), ('x == "pipe"', False),
    ('r["schedule"] != "hybrid"', True), ('k == "F"', False),
])
def test_the_name_check_itself(snippet: str, hit: bool) -> None:
    node = ast.parse(snippet).body[0].value  # type: ignore[attr-defined]
    assert any(_is_name_literal(x) for x in [node.left, *node.comparators]) is hit


def _private_reads(tree: ast.AST) -> Iterator[int]:
    """Line of every ``obj._name`` whose object is not ``self``/``cls`` (dunders aside)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            yield node.lineno


def test_checkpoints_use_the_public_interface() -> None:
    """A checkpoint saves and restores the emulator, a rank and a stage runtime through what
    they publish: a checkpoint module reading ``emu._acts`` breaks silently when the class
    renames a field, and the format then no longer says what a run's state is."""
    mods = [m for m in MODULES if m.rpartition(".")[2].endswith("checkpoint")]
    assert {"stalesim.emulator.checkpoint", "stalesim.executor.checkpoint"} <= set(mods)
    offenders = [f"{MODULES[m].relative_to(ROOT)}:{line}" for m in mods
                 for line in _private_reads(ast.parse(MODULES[m].read_text(), str(MODULES[m])))]
    assert not offenders, "checkpoint code reads private attributes: " + ", ".join(offenders)


@pytest.mark.parametrize("snippet, hit", [
    ("emu._acts", True), ("x = rank._store.inputs", True), ("self._dir(k)", False),
    ("emu.handoff.acts", False), ("t.__class__", False), ("cls._make()", False),
])
def test_the_private_read_check_itself(snippet: str, hit: bool) -> None:
    assert bool(list(_private_reads(ast.parse(snippet)))) is hit


# Functions that are declarative tables (one literal entry per case or schedule, no logic): the
# length limit is for logic a reader must follow, and a table is read one row at a time.
TABLES = {"lab.checks.probe_inputs:cases", "stalesim.schedule.registry:_specs"}
MAX_FUNCTION_LINES = 80
MAX_METHODS = 25


def _sizes(tree: ast.Module) -> Iterator[tuple[str, str, int]]:
    """("function" | "class", name, size): a function's lines, a class's own methods."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield "function", node.name, (node.end_lineno or node.lineno) - node.lineno + 1
        elif isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            yield "class", node.name, len(methods)


def test_functions_and_classes_stay_small() -> None:
    too_big = []
    for mod, path in MODULES.items():
        for kind, name, size in _sizes(ast.parse(path.read_text(encoding="utf-8"))):
            limit = MAX_FUNCTION_LINES if kind == "function" else MAX_METHODS
            if size > limit and f"{mod}:{name}" not in TABLES:
                too_big.append(f"{mod}:{name} ({kind}, {size})")
    assert not too_big, f"over {MAX_FUNCTION_LINES} lines / {MAX_METHODS} methods: {too_big}"


def test_the_size_check_itself() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    sizes = list(_sizes(ast.parse(f"def long():\n{body}\n")))
    assert sizes == [("function", "long", MAX_FUNCTION_LINES + 1)]
    methods = "\n".join(f"    def m{i}(self): pass" for i in range(3))
    assert ("class", "C", 3) in _sizes(ast.parse(f"class C:\n{methods}\n"))


# A module is read whole: past this many lines it holds more than one job (the style guide's
# "small modules with one job"); split it rather than raise the limit.
MAX_MODULE_LINES = 600
# The modules over the limit when the rule came in, with their line count then and why they
# are still one file. The dict only shrinks: a module that gets under the limit (or goes) must
# leave it (the test says so), and no module joins it: split the module instead.
EXCEPTIONS: dict[str, tuple[int, str]] = {
    "lab/reproduce/tables.py": (780, "most RESULTS.md tables' renderers (52 functions) in one place"),
    "stalesim/workloads/hardware.py": (786, "devices, links, the catalog and the roofline what-if together"),
    "stalesim/validate/steps.py": (646, "every step of validate in one module"),
    "stalesim/workloads/profiler.py": (621, "the measuring rounds, device and precision helpers and the static pass"),
    "stalesim/workloads/profile.py": (633, "the Profile types, their checked JSON reader and the synthetic profile"),
    "stalesim/validate/stagetime.py": (617, "pooled stage-time statistics and the measuring of stage layouts together"),
    "stalesim/workloads/partition.py": (606, "PPV conversions, stage splitting and the partitioner together"),
}


def _module_lines() -> dict[str, int]:
    return {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES.values()}


def test_modules_stay_small() -> None:
    lines = _module_lines()
    too_big = [f"{path} ({n})" for path, n in sorted(lines.items())
               if n > MAX_MODULE_LINES and path not in EXCEPTIONS]
    assert not too_big, f"modules over {MAX_MODULE_LINES} lines (split them): {too_big}"
    done = [path for path in EXCEPTIONS if lines.get(path, 0) <= MAX_MODULE_LINES]
    assert not done, f"now within {MAX_MODULE_LINES} lines (or gone): remove from EXCEPTIONS: {done}"


# ``Any`` left in the executor's public signatures, each for a reason stated where it is: the
# summary a run returns (RunSummary's JSON form, and run_local's one-or-a-list of them, which
# stalesim.api.run marks), a checkpoint read back from a file (checked key by key, not by a
# type), the rendezvous dict stalesim.rendezvous takes, the spec file a rank parses, the job dict
# make_job returns to callers that hold it as a plain dict, and the package's lazy __getattr__.
# Lower it when one goes; never raise it.
EXECUTOR_PUBLIC_ANY = 8


def _mentions_any(node: ast.AST | None) -> bool:
    """Whether an annotation names ``Any`` (``typing.Any`` too, and inside string annotations)."""
    for n in ast.walk(node) if node is not None else ():
        if isinstance(n, ast.Name) and n.id == "Any" or isinstance(n, ast.Attribute) and n.attr == "Any":
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            try:
                if _mentions_any(ast.parse(n.value, mode="eval")):
                    return True
            except SyntaxError:
                continue
    return False


def _public_any(tree: ast.Module) -> Iterator[str]:
    """``name(param)`` / ``name ->`` for each parameter and return annotation with ``Any`` in a
    public function or method: module-level functions and methods of module-level classes whose
    names do not start with ``_``, dunders (``__init__``) counted as public."""
    defs: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.append(node)
        elif isinstance(node, ast.ClassDef):
            defs += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in defs:
        if fn.name.startswith("_") and not (fn.name.startswith("__") and fn.name.endswith("__")):
            continue
        a = fn.args
        for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if p is not None and _mentions_any(p.annotation):
                yield f"{fn.name}({p.arg})"
        if _mentions_any(fn.returns):
            yield f"{fn.name} ->"


def test_the_executor_boundary_stays_typed() -> None:
    """The executor's public signatures name their types (the Schedule, the TrainConfig, the rank
    context, the Job and RankPayload TypedDicts), so mypy checks every caller against them; an
    ``Any`` there switches that check off for everything passed through it, silently, and the
    executor once had 69 of them (by this count). The count may only go down (EXECUTOR_PUBLIC_ANY)."""
    hits = [f"{path.relative_to(ROOT)}: {h}" for path in sorted((ROOT / "stalesim" / "executor").rglob("*.py"))
            for h in _public_any(ast.parse(path.read_text(encoding="utf-8"), str(path)))]
    assert len(hits) <= EXECUTOR_PUBLIC_ANY, (
        f"{len(hits)} Any in the executor's public signatures (at most {EXECUTOR_PUBLIC_ANY}): name the "
        "type instead: " + ", ".join(hits))


@pytest.mark.parametrize("snippet, hits", [
    ("def f(x: Any) -> None: ...", ["f(x)"]), ("def f(x: 'dict[str, Any]') -> None: ...", ["f(x)"]),
    ("def f(*a: typing.Any) -> Any: ...", ["f(a)", "f ->"]), ("def _f(x: Any) -> None: ...", []),
    ("class C:\n    def __init__(self, x: Any) -> None: ...\n    def _g(self) -> Any: ...", ["__init__(x)"]),
    ("def f(x: Schedule) -> dict[str, int]: ...", []),
])
def test_the_any_check_itself(snippet: str, hits: list[str]) -> None:
    assert list(_public_any(ast.parse(snippet))) == hits
