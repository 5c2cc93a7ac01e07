"""Which parameters of a user's ``nn.Module`` form each pipeline stage.

A stage is named by module-name prefixes (``"transformer.h.0"``), by submodules, or left
to :func:`even_split`, which cuts the parameters in registration order into S contiguous
runs of about equal element count, never between two parameters of one module (a
module's weight and bias run on one device). Registration order is the forward order
for the usual models (nanoGPT, Hugging Face, ``nn.Sequential``); a model whose forward
visits its modules in another order should name its stages.

Every mistake is a one-line :class:`~stalesim.errors.StalesimError` naming the stage and
the name: an unknown prefix, a stage with no trainable parameter, a parameter in two
stages (also one tied between two stages, e.g. an embedding shared with the output
layer), a trainable parameter in no stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from stalesim.errors import StalesimError

#: One stage as the user names it: a prefix, a submodule, or a list of those.
StageSpec = str | nn.Module | Sequence[str | nn.Module]


@dataclass(frozen=True)
class StageSplit:
    """The cut: per stage its parameters and their names (registration order)."""

    params: list[list[nn.Parameter]]
    names: list[list[str]]

    @property
    def stages(self) -> int:
        return len(self.params)


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Every (name, parameter) that requires grad, tied ones under each of their names."""
    return [(n, p) for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]


def _under(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _prefixes(model: nn.Module, stage: int, spec: StageSpec) -> list[str]:
    """The stage's entries as module-name prefixes (a submodule by its name in ``model``)."""
    items = [spec] if isinstance(spec, (str, nn.Module)) else list(spec)
    if not items:
        raise StalesimError(f"split: stage {stage} names no module")
    module_names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    out: list[str] = []
    for item in items:
        if isinstance(item, nn.Module):
            name = module_names.get(id(item))
            if name is None:
                raise StalesimError(f"split: stage {stage}: a {type(item).__name__} that is not a submodule "
                                    f"of the model")
            out.append(name)
        elif isinstance(item, str):
            out.append(item)
        else:
            raise StalesimError(f"split: stage {stage}: expected module-name prefixes or submodules, "
                                f"got {type(item).__name__}")
    return out


def named_split(model: nn.Module, stages: Sequence[StageSpec]) -> StageSplit:
    """The stages named by prefixes or submodules, checked (see the module doc)."""
    if isinstance(stages, (str, nn.Module)) or len(stages) < 1:
        raise StalesimError("split: expected one entry per stage (a list of prefixes or submodules)")
    named = _trainable(model)
    module_names = {n for n, _ in model.named_modules(remove_duplicate=False)}
    owner: dict[int, tuple[int, str]] = {}  # id(param) -> (stage, the name it was claimed under)
    params: list[list[nn.Parameter]] = []
    names: list[list[str]] = []
    for s, spec in enumerate(stages):
        ps: list[nn.Parameter] = []
        ns: list[str] = []
        for prefix in _prefixes(model, s, spec):
            hits = [(n, p) for n, p in named if _under(n, prefix)]
            if not hits and prefix not in module_names:
                raise StalesimError(f"split: stage {s}: the model has no module or parameter named {prefix!r}")
            for n, p in hits:
                prev = owner.get(id(p))
                if prev is not None and prev[0] != s:
                    raise StalesimError(f"split: parameter {n!r} of stage {s} is also {prev[1]!r} of stage "
                                        f"{prev[0]}; a parameter shared between two stages is not supported")
                if prev is None:
                    owner[id(p)] = (s, n)
                    ps.append(p)
                    ns.append(n)
        if not ps:
            raise StalesimError(f"split: stage {s} ({', '.join(repr(x) for x in _prefixes(model, s, spec))}) "
                                f"holds no trainable parameter")
        params.append(ps)
        names.append(ns)
    for n, p in named:
        prev = owner.get(id(p))
        if prev is None:
            raise StalesimError(f"split: trainable parameter {n!r} is in no stage; name its module in one")
        # a tied parameter: each of its names must fall in the stage that owns it
        if not any(_under(n, pre) for pre in _prefixes(model, prev[0], stages[prev[0]])):
            raise StalesimError(f"split: parameter {n!r} is tied to {prev[1]!r} of stage {prev[0]} but named "
                                f"in no prefix of that stage; a parameter shared between two stages is not "
                                f"supported")
    return StageSplit(params, names)


def even_split(model: nn.Module, stages: int) -> StageSplit:
    """S contiguous runs of the parameters (registration order) of about equal element
    count, cut only between modules; each cut at the module boundary nearest to k/S of
    the total."""
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise StalesimError(f"stages: expected an integer >= 1, got {stages!r}")
    named = _trainable(model)
    seen: set[int] = set()
    groups: list[list[tuple[str, nn.Parameter]]] = []  # parameters of one module, in order
    tied: list[tuple[str, nn.Parameter, int]] = []  # a tied parameter's later name, after group i
    last_module: str | None = None
    for n, p in named:
        if id(p) in seen:  # a tied parameter goes with its first name
            tied.append((n, p, len(groups) - 1))
            continue
        seen.add(id(p))
        module = n.rpartition(".")[0]
        if groups and module == last_module:
            groups[-1].append((n, p))
        else:
            groups.append([(n, p)])
        last_module = module
    if len(groups) < stages:
        raise StalesimError(f"stages: {stages} stages but the model has only {len(groups)} modules with "
                            f"trainable parameters")
    sizes = [sum(p.numel() for _, p in g) for g in groups]
    total = sum(sizes)
    cum = [0]
    for z in sizes:
        cum.append(cum[-1] + z)
    cuts: list[int] = []
    for k in range(1, stages):
        lo = (cuts[-1] if cuts else 0) + 1  # every stage keeps at least one module
        hi = len(groups) - (stages - k)
        target = total * k / stages
        cuts.append(min(range(lo, hi + 1), key=lambda c: (abs(cum[c] - target), c)))
    bounds = [0, *cuts, len(groups)]
    params = [[p for g in groups[a:b] for _, p in g] for a, b in zip(bounds, bounds[1:])]
    names = [[n for g in groups[a:b] for n, _ in g] for a, b in zip(bounds, bounds[1:])]
    # a tied parameter used where another stage runs is shared between two stages
    stage_of = {id(p): s for s, ps in enumerate(params) for p in ps}
    for n, p, after in tied:
        where = max(s for s, a in enumerate(bounds[:-1]) if a <= after)
        if stage_of[id(p)] != where:
            raise StalesimError(f"split: parameter {n!r} is tied to a parameter of stage {stage_of[id(p)]} "
                                f"but its module falls in stage {where}; a parameter shared between two stages "
                                f"is not supported (name the stages with split=)")
    return StageSplit(params, names)
