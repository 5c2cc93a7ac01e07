"""Activation checkpointing inside a wrapped loop: refused where it would read the wrong weights.

A checkpointed region (``torch.utils.checkpoint``, reentrant or not; ``checkpoint_sequential``;
frameworks' wrappers built on them) saves no activations in the forward and runs its forward
again inside the backward. That recomputation runs on whatever the parameters hold at that
moment, the live weights (version t of the step), and saves those for the backward. A stage
whose forward or backward reads another version at some step would then compute its
gradient from the wrong weights, silently: the recomputation sits inside a
``saved_tensors_hooks`` context of torch's own, so the pipeline's tokens never see it.

A stage that reads the live version in every forward and backward of the schedule (e.g. the
last stage of ``pipedream``) is exact under checkpointing: the live weights are what it reads.
Every other stage's modules get a forward pre-hook that raises when the forward runs inside
a backward (autograd's current graph task), naming the module and the stages that may be
checkpointed. The hook costs one Python call per module forward and reads no tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from stalesim.errors import StalesimError
from stalesim.inject.hooks import eager
from stalesim.schedule import VersionTable


def stale_stages(table: VersionTable, stages: int) -> list[bool]:
    """Per stage: whether some forward or backward of the table reads a version other than
    the live one (t, during step t's backward)."""
    stale = [False] * stages
    for key, v_f in table.vf.items():
        _, s, t, _ = key
        if v_f != t or table.vb[key] != t:
            stale[s] = True
    return stale


def _in_backward() -> bool:
    # autograd's engine sets the graph task id for the thread running a backward; -1 outside
    return bool(torch._C._current_graph_task_id() != -1)


def guard_recompute(model: nn.Module, params: list[list[nn.Parameter]], table: VersionTable) -> list[RemovableHandle]:
    """Forward pre-hooks on every module that holds a parameter of a stage reading older
    versions: a forward of it inside a backward (a checkpointed region's recomputation) is
    a one-line :class:`~stalesim.errors.StalesimError`. Returns the hooks' handles."""
    stale = stale_stages(table, len(params))
    stage_of = {id(p): s for s, ps in enumerate(params) for p in ps if stale[s]}
    live = [s for s, st in enumerate(stale) if not st]
    allowed = f"stage(s) {', '.join(map(str, live))}" if live else "no stage of this schedule"
    handles: list[RemovableHandle] = []
    for name, module in model.named_modules():
        owned = [stage_of[id(p)] for p in module.parameters(recurse=False) if id(p) in stage_of]
        if owned:
            handles.append(module.register_forward_pre_hook(eager(_refuse(name, owned[0], allowed))))
    return handles


def _refuse(name: str, stage: int, allowed: str) -> Callable[[nn.Module, Any], None]:
    def hook(module: nn.Module, args: Any) -> None:
        if _in_backward():
            raise StalesimError(
                f"activation checkpointing: module {name!r} of stage {stage} ran its forward again in the "
                f"backward (a checkpointed region's recomputation) on the live weights, where the schedule "
                f"has stage {stage} read older versions; checkpoint only {allowed} (those read the live "
                f"weights throughout)")
    return hook
